"""Shows an ipykernel 7.4 issue that rules out subshells for the server's checkpoint requests.

Client A runs a 4 s cell; client B sends any request on a new subshell meanwhile. B's reply
carries A's cell as its parent, and A never receives its execute_reply: a notebook would show
the cell as running forever. Run: python docs/subshell_probe.py
"""

import queue
import time

from jupyter_client import KernelManager

km = KernelManager(kernel_name="python3")
km.start_kernel()
a = km.client()
a.start_channels()
a.wait_for_ready(timeout=30)
b = km.client()
b.start_channels()
b.wait_for_ready(timeout=30)
cell = a.execute("import time; time.sleep(4); print('done')")
time.sleep(1)
m = b.session.msg("create_subshell_request", {})
b.control_channel.send(m)
r = b.get_control_msg(timeout=5)
sid = r["content"]["subshell_id"]
print("subshell", sid)
o = b.session.msg("kernel_info_request", {})
o["header"]["subshell_id"] = sid
b.shell_channel.send(o)
time.sleep(0.5)
print("b shell msgs:")
while True:
    try:
        x = b.get_shell_msg(timeout=0.5)
        print("  B got", x["msg_type"], x["parent_header"].get("msg_id") == cell)
    except queue.Empty:
        break
t = time.time()
while True:
    try:
        x = a.get_shell_msg(timeout=10)
        print(
            "A got",
            x["msg_type"],
            x["parent_header"].get("msg_id") == cell,
            round(time.time() - t, 2),
        )
        if x["msg_type"] == "execute_reply":
            break
    except queue.Empty:
        print("A got NOTHING more")
        break
while True:
    try:
        x = b.get_shell_msg(timeout=1)
        print("  B later got", x["msg_type"], x["parent_header"].get("msg_id") == cell)
    except queue.Empty:
        break
km.shutdown_kernel(now=True)
