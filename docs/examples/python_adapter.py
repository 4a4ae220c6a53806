#!/usr/bin/env python3
"""A console channel for switchboard, written from docs/bus.md alone.

Each line read from standard input is one message from one person to one chat; the replies
switchboard sends back are printed, one JSON object per line. Needs nats-py
(`pip install nats-py`) and a NATS server with JetStream that a switchboard agent uses:

    python3 python_adapter.py --nats nats://127.0.0.1:4222 --chat "kitchen table" --sender 42

It exits after the last input line has been answered (or after --timeout seconds without an
answer, with status 1).
"""

import argparse
import asyncio
import json
import sys
import uuid
from datetime import datetime, timezone

import nats
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

CHANNEL = "console"
PLAIN = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def encode_token(s: str) -> str:
    """One subject token for any string (docs/bus.md, Subjects)."""
    if s == "":
        return "~~"
    return "".join(chr(b) if b in PLAIN else "~%02X" % b for b in s.encode("utf-8"))


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def inbound(chat_id: str, sender: str, text: str) -> dict:
    return {
        "v": 1,
        # Stable per message: a console line has no platform id, so make one and keep it for
        # any re-publish of this line.
        "id": f"{CHANNEL}:{chat_id}:{uuid.uuid4()}",
        "channel": CHANNEL,
        "chat_id": chat_id,
        "sender": {"id": sender, "name": f"console user {sender}", "is_bot": False},
        "content": text,
        "kind": "user",
        "is_group": False,
        "mentioned": True,
        "received_at": now(),
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--prefix", default="switchboard")
    parser.add_argument("--chat", default="console")
    parser.add_argument("--sender", default="me")
    parser.add_argument("--ack-wait", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()

    nc = await nats.connect(args.nats, name="python console adapter")
    js = nc.jetstream()
    streams = args.prefix.upper().replace(".", "_")
    channel = encode_token(CHANNEL)
    # The channel's one durable consumer, with the documented settings (created or bound).
    replies = await js.pull_subscribe(
        f"{args.prefix}.out.{channel}.*",
        durable=f"out-{channel}",
        stream=f"{streams}_OUT",
        config=ConsumerConfig(
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=args.ack_wait,
            max_ack_pending=64,
            max_deliver=10,
            deliver_policy=DeliverPolicy.ALL,
        ),
    )

    waiting = set()
    subject = f"{args.prefix}.in.{channel}.{encode_token(args.chat)}"
    for line in sys.stdin:
        text = line.rstrip("\n")
        if not text.strip():
            continue
        msg = inbound(args.chat, args.sender, text)
        payload = json.dumps(msg).encode()
        ack = await js.publish(subject, payload, headers={"Nats-Msg-Id": msg["id"]})
        # Publishing the same id again (as after a crash before the platform was told) is
        # dropped by the server.
        again = await js.publish(subject, payload, headers={"Nats-Msg-Id": msg["id"]})
        print(json.dumps({"published": msg["id"], "seq": ack.seq, "republish_duplicate": again.duplicate}), flush=True)
        waiting.add(msg["id"])

    delivered = set()
    deadline = asyncio.get_running_loop().time() + args.timeout
    while waiting:
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            print(json.dumps({"error": "no reply in time", "waiting": sorted(waiting)}), flush=True)
            return 1
        try:
            messages = await replies.fetch(1, timeout=min(left, 5.0))
        except NatsTimeout:
            continue
        for message in messages:
            reply = json.loads(message.data)
            # A redelivered copy of something already shown is acked and skipped.
            if reply["id"] not in delivered and reply.get("content"):
                print(json.dumps({"reply": reply["content"], "kind": reply.get("kind", "reply"),
                                  "in_reply_to": reply.get("in_reply_to")}), flush=True)
            delivered.add(reply["id"])
            await message.ack()
            if reply.get("kind", "reply") != "progress":
                waiting.discard(reply.get("in_reply_to"))
    await nc.drain()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
