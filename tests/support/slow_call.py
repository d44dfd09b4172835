"""A process whose durable ``wire_money`` calls hang until it is killed.

``python -m tests.support.slow_call SCHEMA PREFIX THREAD...`` starts one call per thread (call id
``call_w``, 100 cents), prints ``calling`` as each starts, and sleeps: the caller reads the
lines, then inspects the started calls or kills the process mid-call.
"""

from __future__ import annotations

import sys
import threading
import time

from langgraph_durable import DurableSaver, durable_tool


def main(schema: str, prefix: str, threads: list[str]) -> None:
    saver = DurableSaver(schema=schema, key_prefix=prefix)
    printing = threading.Lock()  # one whole line per call, whatever the threads do

    @durable_tool(saver=saver)
    def wire_money(cents: int) -> str:
        """Wire money (slowly)."""
        with printing:
            sys.stdout.write("calling\n")
            sys.stdout.flush()
        time.sleep(60)
        return "sent"

    def call(thread: str) -> None:
        wire_money.invoke({"name": "wire_money", "args": {"cents": 100}, "id": "call_w",
                           "type": "tool_call"}, config={"configurable": {"thread_id": thread}})

    for thread in threads:
        threading.Thread(target=call, args=(thread,), daemon=True).start()
    time.sleep(60)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
