"""Drives switchboard's OpenAI-compatible endpoint with the official OpenAI Python client.

Usage: openai_client.py BASE_URL CHAT_TOKEN LIMITED_TOKEN
Prints one JSON object with what each call gave; the Rust test checks it.
"""

import json
import sys

import openai


def error_kind(call):
    """The client's error class and status for a call expected to fail."""
    try:
        call()
    except openai.APIStatusError as err:
        return f"{type(err).__name__}:{err.status_code}"
    return "no error"


def main():
    base, token, limited_token = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=token, max_retries=0, timeout=60)
    out = {"models": [model.id for model in client.models.list().data]}
    model = out["models"][0]

    plain = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "ignored"}, {"role": "user", "content": "hello plain"}],
        user="py-plain",
    )
    choice = plain.choices[0]
    out["plain"] = {
        "content": choice.message.content,
        "role": choice.message.role,
        "finish": choice.finish_reason,
        "total_tokens": plain.usage.total_tokens,
        "model": plain.model,
    }

    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hello streamed"}],
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"X-Switchboard-Session": "py-stream"},
    )
    deltas, finish, total_tokens = [], None, None
    for chunk in stream:
        if chunk.choices:
            if chunk.choices[0].delta.content:
                deltas.append(chunk.choices[0].delta.content)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            total_tokens = chunk.usage.total_tokens
    out["stream"] = {"deltas": deltas, "finish": finish, "total_tokens": total_tokens}

    wrong = openai.OpenAI(base_url=f"{base}/v1", api_key="sb_wrong", max_retries=0)
    out["wrong_token"] = error_kind(lambda: wrong.models.list())
    out["unknown_model"] = error_kind(
        lambda: client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    )
    limited = openai.OpenAI(base_url=f"{base}/v1", api_key=limited_token, max_retries=0)
    kinds = [error_kind(lambda: limited.models.list()) for _ in range(3)]
    out["rate_limited"] = kinds
    print(json.dumps(out))


if __name__ == "__main__":
    main()
