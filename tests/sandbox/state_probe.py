"""Runs INSIDE the sandbox (as a submission): `plant` leaves a mark everywhere a program can
write, `read` looks for any of them, `both` does both in one process (proof that `read` sees
what `plant` leaves). Prints one JSON object. Standard library only; Linux x86-64 syscall numbers.
"""

import ctypes
import json
import os
import socket
import sys
import time

TOKEN = "xrpoleak7f3a"
KEY = 0x7F3A1234  # SysV IPC key
MODE = 0o753  # a directory mode nobody uses
MTIME = 1234567897  # a directory time nobody sets
SKIP = ("/proc", "/sys")
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mq_open.restype = ctypes.c_int
SYS_ADD_KEY, SYS_KEYCTL, KEYCTL_SEARCH, USER_KEYRING = 248, 250, 10, -4


def dirs():
    stack = ["/"]
    while stack:
        d = stack.pop()
        yield d
        try:
            with os.scandir(d) as it:
                stack += [e.path for e in it if e.is_dir(follow_symlinks=False) and not e.path.startswith(SKIP)]
        except OSError:
            pass


def hand_over(msqid: int) -> int:
    """Give a message queue to uid 65534 (IPC_SET by its owner): no longer ours, still readable."""
    buf = ctypes.create_string_buffer(512)
    if msqid < 0 or libc.msgctl(msqid, 2, buf) != 0:  # IPC_STAT
        return -1
    ctypes.memmove(ctypes.addressof(buf) + 4, ctypes.byref(ctypes.c_uint32(65534)), 4)  # ipc_perm.uid
    return libc.msgctl(msqid, 1, buf)  # IPC_SET


def plant() -> dict:
    files, marked = [], []
    for d in list(dirs()):
        if os.access(d, os.W_OK):
            try:
                with open(os.path.join(d, f".{TOKEN}"), "w") as f:
                    f.write(TOKEN)
                os.mkdir(os.path.join(d, f"{TOKEN}.d"), 0)  # an unreadable directory
                files.append(d)
            except OSError:
                pass
        try:
            if os.stat(d).st_uid == os.getuid():
                os.setxattr(d, f"user.{TOKEN}", b"1")
                os.chmod(d, MODE)
                os.utime(d, (MTIME, MTIME))
                marked.append(d)
        except OSError:
            pass
    ipc = {
        "shm": libc.shmget(KEY, 4096, 0o1000 | 0o666),
        "sem": libc.semget(KEY, 1, 0o1000 | 0o666),
        "msg": libc.msgget(KEY, 0o1000 | 0o666),
        "mq": libc.mq_open(f"/{TOKEN}".encode(), os.O_CREAT | os.O_RDWR, 0o666, None),
        "key": libc.syscall(SYS_ADD_KEY, b"user", TOKEN.encode(), TOKEN.encode(), len(TOKEN), USER_KEYRING),
        "handed": hand_over(libc.msgget(KEY + 1, 0o1000 | 0o666)),
    }
    if os.fork() == 0:  # a detached daemon holding an abstract unix socket
        os.setsid()
        if os.fork() == 0:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind("\0" + TOKEN)
            s.listen(1)
            s.set_inheritable(True)
            os.execv(sys.executable, [sys.executable, "-c", f"import time; time.sleep(60)  # {TOKEN}"])
        os._exit(0)
    time.sleep(0.3)
    return {"files": files, "marked": marked, "ipc": ipc}


def read() -> list[str]:
    found = []
    for d in dirs():
        try:
            if any(TOKEN in n for n in os.listdir(d)):
                found.append(f"file in {d}")
            st = os.stat(d)
            if st.st_mode & 0o7777 == MODE or int(st.st_mtime) == MTIME:
                found.append(f"mode or time of {d}")
            if any(TOKEN in a for a in os.listxattr(d)):
                found.append(f"xattr of {d}")
        except OSError:
            pass
    if libc.shmget(KEY, 0, 0) >= 0:
        found.append("SysV shared memory")
    if libc.semget(KEY, 0, 0) >= 0:
        found.append("SysV semaphore")
    if libc.msgget(KEY, 0) >= 0:
        found.append("SysV message queue")
    if libc.msgget(KEY + 1, 0) >= 0:
        found.append("SysV message queue of another uid")
    if libc.mq_open(f"/{TOKEN}".encode(), os.O_RDONLY) >= 0:
        found.append("POSIX message queue")
    if libc.syscall(SYS_KEYCTL, KEYCTL_SEARCH, USER_KEYRING, b"user", TOKEN.encode(), 0) >= 0:
        found.append("user keyring")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect("\0" + TOKEN)
        found.append("abstract socket")
    except OSError:
        pass
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and TOKEN.encode() in open(f"/proc/{p}/cmdline", "rb").read():
                found.append(f"process {p}")
        except OSError:
            pass
    found += [f"environment {k}" for k, v in os.environ.items() if TOKEN in k + v]
    return found


if sys.argv[1] == "plant":
    print(json.dumps(plant()))
elif sys.argv[1] == "read":
    print(json.dumps({"found": read()}))
else:
    print(json.dumps({**plant(), "found": read()}))
