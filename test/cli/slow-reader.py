"""Runs a command with one of its outputs through a pipe or a terminal this script reads late and slowly.

usage: slow-reader.py MODE FD OUT CMD...
  MODE  block: a pipe in blocking mode (a shell's); nonblock: a pipe whose write end is in
        non-blocking mode (as a parent that made its own stdout stream on it leaves it), so that a
        full pipe answers a write with EAGAIN or a short count; closed: a pipe whose read end is
        closed before the command starts (EPIPE); pty: a terminal in raw mode (no CR added)
  FD    1 or 2: the command's output that goes there (its stderr, when FD is 1, is this script's;
        its stdout, when FD is 2, goes to /dev/null)
  OUT   the file the bytes read are written to
Prints the command's exit code (or minus the signal) on stdout.
"""
import os
import subprocess
import sys
import time
import tty

mode, fd, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cmd = sys.argv[4:]
if mode == 'pty':
    r, w = os.openpty()
    tty.setraw(w)
else:
    r, w = os.pipe()
    if mode == 'nonblock':
        os.set_blocking(w, False)
    if mode == 'closed':
        os.close(r)
null = os.open('/dev/null', os.O_WRONLY)
p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=w if fd == 1 else null, stderr=w if fd == 2 else None)
os.close(w)
got = bytearray()
if mode != 'closed':
    # Late (the pipe fills and the writer must wait), then in small pieces.
    time.sleep(0.5)
    while True:
        try:
            b = os.read(r, 16384)
        except OSError:  # a terminal whose other side closed: EIO
            break
        if not b:
            break
        got += b
        time.sleep(0.001)
with open(out, 'wb') as f:
    f.write(got)
print(p.wait())
