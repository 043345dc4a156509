#!/usr/bin/env python3
"""A loopback TCP proxy a bench controls, like a link that goes down (tests/support/tcp_proxy.h).

It forwards every connection from its port to 127.0.0.1:TARGET. SIGUSR1 cuts the link: every
forwarded connection is closed, and new ones are accepted and closed at once, until SIGUSR2
forwards again. Or, with --control FILE, the link is cut while FILE exists (checked every
0.05 s). SIGTERM or SIGINT ends it.

Usage: tcp_proxy.py TARGET_PORT [--listen PORT] [--port-file FILE] [--control FILE]
       (--listen 0, the default, picks an unused port; --port-file gets it, one line, once
       the proxy accepts connections)
"""
import argparse
import os
import signal
import socket
import sys
import threading
import time


class Proxy:
    def __init__(self, target_port, listen_port):
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", listen_port))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.open = set()  # both ends of every forwarded connection
        self.is_cut = False

    def cut(self):
        with self.lock:
            self.is_cut = True
            sockets, self.open = self.open, set()
        for s in sockets:
            close(s)

    def restore(self):
        with self.lock:
            self.is_cut = False

    def accept_loop(self):
        while True:
            client, _ = self.listener.accept()
            with self.lock:
                refused = self.is_cut
            if refused:
                close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                close(client)
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                if self.is_cut:  # cut while connecting
                    close(client)
                    close(upstream)
                    continue
                self.open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    def pump(self, source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        with self.lock:
            self.open.discard(source)
            self.open.discard(sink)
        close(source)
        close(sink)


def close(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target_port", type=int)
    parser.add_argument("--listen", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--control")
    args = parser.parse_args()
    proxy = Proxy(args.target_port, args.listen)
    signal.signal(signal.SIGUSR1, lambda *_: proxy.cut())
    signal.signal(signal.SIGUSR2, lambda *_: proxy.restore())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Thread(target=proxy.accept_loop, daemon=True).start()
    if args.port_file:
        with open(args.port_file + ".tmp", "w") as f:
            f.write(f"{proxy.port}\n")
        os.replace(args.port_file + ".tmp", args.port_file)
    print(f"tcp_proxy: 127.0.0.1:{proxy.port} -> 127.0.0.1:{args.target_port}", flush=True)
    while True:
        if args.control:
            want_cut = os.path.exists(args.control)
            if want_cut and not proxy.is_cut:
                proxy.cut()
            elif not want_cut and proxy.is_cut:
                proxy.restore()
        time.sleep(0.05)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
