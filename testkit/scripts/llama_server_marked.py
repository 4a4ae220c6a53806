#!/usr/bin/env python3
"""llama-cpp-python's server as SERVE_PY (../shared/real-llm/serve_noextra.py) starts it, with one
line in its log at the start of every chat request:

    chat request: 9 messages, 11 tools, tool_choice='auto', stream=False

so that real_llm_check.py can tell requests apart: the `chatml-function-calling` format makes
several completions for one request (deciding between a message and a tool call, then writing
it), each with its own "prefix-match hit" line. Nothing else changes.

Usage: llama_server_marked.py SERVE_PY SERVER_ARGS...
"""
import runpy, sys

import llama_cpp

_create = llama_cpp.Llama.create_chat_completion


def _marked(self, *args, **kwargs):
    messages = kwargs.get("messages") or (args[0] if args else [])
    print(f"chat request: {len(messages)} messages, {len(kwargs.get('tools') or [])} tools, "
          f"tool_choice={kwargs.get('tool_choice')!r}, stream={bool(kwargs.get('stream'))}",
          file=sys.stderr, flush=True)
    return _create(self, *args, **kwargs)


llama_cpp.Llama.create_chat_completion = _marked
serve = sys.argv[1]
sys.argv = [serve] + sys.argv[2:]
runpy.run_path(serve, run_name="__main__")
