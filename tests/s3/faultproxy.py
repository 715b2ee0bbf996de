#!/usr/bin/python3
"""A fault-injecting HTTP reverse proxy for S3 tests (stdlib only).

Listens on 127.0.0.1 (a free port unless --port) in front of --upstream
(default $AWS_ENDPOINT_URL) and forwards each request byte for byte: the
request line (a path with "//" included) and every header as sent, Host
and Authorization too.  SigV4 signs the Host header, so the client
addresses the proxy and the gateway sees that same Host; the signature
still matches (radosgw checks it against the Host it receives).

Faults form a plan consumed in the order given:
  --slowdown N   answer 503 with an S3 <Error><Code>SlowDown</Code> body
  --error500 N   answer 500 with an S3 <Error><Code>InternalError</Code> body
  --reset N      close the connection (RST) without an answer
By default the first requests take the plan (--slowdown 2 --reset 1:
requests 1-2 get 503, request 3 is reset, the rest pass).  --every K
gives it to every K-th request instead (K, 2K, ...); there a count of 0
means without end.  --delay-ms D holds each request (each K-th with
--every) D ms before it is handled.

--no-conditional answers every request that carries If-None-Match with
501 NotImplemented, as a server without conditional writes does.

--control FILE holds the same settings, one per line ("slowdown 2",
"every 3", "delay-ms 50", "reset 1", "error500 1"); when its contents
change they replace the flags and the plan is armed again from the next
request on.  An empty file (made empty once it held something) means no
faults; a file missing at the start leaves the flags in force.

The port goes to the first line of stdout and to --port-file.  --stats
FILE is rewritten (atomically, JSON) on each request with the counts
(and inflight_max, the most requests it held at once from the fault
plan's decision to the answer, and inflight_max_METHOD, of one method);
--log FILE gets one line per request: "N METHOD TARGET ACTION".
"""
import argparse
import json
import os
import socket
import socketserver
import sys
import threading
import time
import urllib.parse

KINDS = ("slowdown", "error500", "reset")


class Faults:
    """The plan and the counters, shared by all connections."""

    def __init__(self, args):
        self.lock = threading.Lock()
        self.control = args.control
        self.control_text = ""     # a missing file leaves the flags' plan
        self.stats_path = args.stats
        self.log_path = args.log
        self.counts = {"requests": 0, "forwarded": 0, "slowdown": 0,
                       "error500": 0, "reset": 0, "delayed": 0,
                       "upstream_errors": 0, "inflight_max": 0}
        self.inflight = 0
        self.inflight_by = {}
        self.arm(args.plan or [], args.every, args.delay_ms)

    def arm(self, plan, every, delay_ms):
        self.plan = [(k, n) for k, n in plan]
        self.every = max(1, every or 1)
        self.unbounded = every is not None     # --every given: 0 is endless
        self.delay_ms = delay_ms or 0
        self.seen = 0           # requests since armed
        self.step = 0           # faults given since armed

    def reread_control(self):
        if not self.control:
            return
        try:
            with open(self.control) as f:
                text = f.read()
        except FileNotFoundError:
            text = ""
        if text == self.control_text:
            return
        self.control_text = text
        plan, every, delay = [], None, 0
        for line in text.splitlines():
            w = line.split()
            if not w or w[0].startswith("#"):
                continue
            name = w[0].lstrip("-")
            val = int(w[1]) if len(w) > 1 else 1
            if name in KINDS:
                plan.append((name, val))
            elif name == "every":
                every = val
            elif name in ("delay-ms", "delay_ms"):
                delay = val
        self.arm(plan, every, delay)

    def next_fault(self):
        """Count a request; return (number, fault kind or None, delay s)."""
        with self.lock:
            self.reread_control()
            self.counts["requests"] += 1
            n = self.counts["requests"]
            self.seen += 1
            if self.seen % self.every:
                self.counts["forwarded"] += 1
                self.write_stats()
                return n, None, 0
            delay = self.delay_ms / 1000.0
            if delay:
                self.counts["delayed"] += 1
            kind = None
            i = self.step
            for k, cnt in self.plan:
                if cnt == 0 and self.unbounded:
                    kind = k
                    break
                if i < cnt:
                    kind = k
                    break
                i -= cnt
            if kind:
                self.step += 1
                self.counts[kind] += 1
            else:
                self.counts["forwarded"] += 1
            self.write_stats()
            return n, kind, delay

    def refuse_conditional(self):
        with self.lock:
            self.counts["not_implemented"] = self.counts.get("not_implemented", 0) + 1
            self.write_stats()

    def enter(self, method):
        with self.lock:
            self.inflight += 1
            n = self.inflight_by[method] = self.inflight_by.get(method, 0) + 1
            key = "inflight_max_" + method
            if self.inflight > self.counts["inflight_max"] or n > self.counts.get(key, 0):
                self.counts["inflight_max"] = max(self.counts["inflight_max"], self.inflight)
                self.counts[key] = max(self.counts.get(key, 0), n)
                self.write_stats()

    def leave(self, method):
        with self.lock:
            self.inflight -= 1
            self.inflight_by[method] -= 1

    def note(self, key):
        with self.lock:
            self.counts[key] += 1
            self.write_stats()

    def write_stats(self):
        if not self.stats_path:
            return
        tmp = f"{self.stats_path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(self.counts, f, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.stats_path)

    def log(self, line):
        if not self.log_path:
            return
        with self.lock:
            with open(self.log_path, "a") as f:
                f.write(line + "\n")


class Closed(Exception):
    pass


class Reader:
    """Buffered reads of HTTP framing from a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise Closed()
        self.buf += data

    def head(self):
        """The bytes up to and including the blank line; b"" at a clean EOF."""
        while True:
            i = self.buf.find(b"\r\n\r\n")
            if i >= 0:
                h, self.buf = self.buf[:i + 4], self.buf[i + 4:]
                return h
            if len(self.buf) > 1 << 20:
                raise Closed()
            try:
                self.fill()
            except Closed:
                if self.buf:
                    raise
                return b""

    def line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                ln, self.buf = self.buf[:i + 2], self.buf[i + 2:]
                return ln
            self.fill()

    def exact(self, n, out):
        """Copy n bytes to out (a socket, or None to drop them)."""
        while n > 0:
            if not self.buf:
                self.fill()
            chunk, self.buf = self.buf[:n], self.buf[n:]
            if out is not None:
                out.sendall(chunk)
            n -= len(chunk)

    def chunked(self, out):
        while True:
            ln = self.line()
            out.sendall(ln)
            size = int(ln.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:     # trailers up to the blank line
                    t = self.line()
                    out.sendall(t)
                    if t == b"\r\n":
                        return
            self.exact(size + 2, out)

    def until_eof(self, out):
        while True:
            if self.buf:
                out.sendall(self.buf)
                self.buf = b""
            try:
                self.fill()
            except Closed:
                return


def parse_head(head):
    lines = head[:-4].split(b"\r\n")
    first = lines[0].decode("latin-1")
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(b":")
        hdrs[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
    return first, hdrs


def wants_close(hdrs, version):
    conn = hdrs.get("connection", "").lower()
    return "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)


def relay_body(reader, hdrs, out):
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        reader.chunked(out)
    elif "content-length" in hdrs:
        reader.exact(int(hdrs["content-length"]), out)


def error_response(status, reason, code, message, method):
    rid = os.urandom(8).hex()
    body = ('<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<RequestId>{rid}</RequestId><HostId>faultproxy</HostId></Error>").encode()
    head = (f"HTTP/1.1 {status} {reason}\r\n"
            "Content-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"x-amz-request-id: {rid}\r\n"
            "Connection: close\r\n\r\n").encode()
    return head if method == "HEAD" else head + body


class Handler(socketserver.BaseRequestHandler):
    def setup(self):
        self.up = None
        self.upr = None

    def finish(self):
        if self.up:
            self.up.close()

    def upstream(self):
        if self.up is None:
            self.up = socket.create_connection(self.server.upstream, timeout=120)
            self.up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.upr = Reader(self.up)
        return self.up

    def drop_upstream(self):
        if self.up:
            self.up.close()
        self.up = self.upr = None

    def linger_close(self, cr):
        # close after the client has sent what it meant to, so that
        # unread request bytes do not turn our FIN into a RST
        c = self.request
        try:
            c.shutdown(socket.SHUT_WR)
            c.settimeout(2)
            while c.recv(65536):
                pass
        except OSError:
            pass

    def answer(self, cr, head, first, hdrs, method, version, n, kind, delay):
        """One request, faulted or forwarded; False when the connection
        is done."""
        c = self.request
        faults = self.server.faults
        if delay:
            time.sleep(delay)
        if kind:
            faults.log(f"{n} {first} {kind}")
            if kind == "reset":
                # linger 0 and close here: socketserver would
                # shut down first and send a FIN, not a RST
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                             b"\x01\x00\x00\x00\x00\x00\x00\x00")
                c.close()
                return False
            if kind == "slowdown":
                resp = error_response(503, "Slow Down", "SlowDown",
                                      "Please reduce your request rate.", method)
            else:
                resp = error_response(500, "Internal Server Error",
                                      "InternalError",
                                      "We encountered an internal error. "
                                      "Please try again.", method)
            c.sendall(resp)
            self.linger_close(cr)
            return False
        if self.server.no_conditional and "if-none-match" in hdrs:
            faults.refuse_conditional()
            faults.log(f"{n} {first} not-implemented")
            c.sendall(error_response(501, "Not Implemented", "NotImplemented",
                                     "A header you provided implies functionality "
                                     "that is not implemented.", method))
            self.linger_close(cr)
            return False
        faults.log(f"{n} {first} forward")
        if not self.forward(cr, head, hdrs, method):
            return False
        return not wants_close(hdrs, version)

    def handle(self):
        c = self.request
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cr = Reader(c)
        faults = self.server.faults
        try:
            while True:
                head = cr.head()
                if not head:
                    return
                first, hdrs = parse_head(head)
                parts = first.split(" ")
                method = parts[0]
                version = parts[2] if len(parts) > 2 else "HTTP/1.0"
                n, kind, delay = faults.next_fault()
                faults.enter(method)
                try:
                    go_on = self.answer(cr, head, first, hdrs, method, version,
                                        n, kind, delay)
                finally:
                    faults.leave(method)
                if not go_on:
                    return
        except (Closed, OSError, ValueError):
            return

    def forward(self, cr, head, hdrs, method):
        """Forward one request and relay its answer; False to close."""
        try:
            up = self.upstream()
            up.sendall(head)
        except OSError:
            # a kept-alive upstream connection the gateway closed: once more
            self.drop_upstream()
            try:
                up = self.upstream()
                up.sendall(head)
            except OSError:
                self.server.faults.note("upstream_errors")
                self.request.sendall(error_response(
                    502, "Bad Gateway", "BadGateway", "upstream unreachable", method))
                return False
        expect = "100-continue" in hdrs.get("expect", "").lower()
        if expect:
            rhead = self.upr.head()
            if not rhead:
                raise Closed()
            status = int(rhead.split(b" ", 2)[1])
            self.request.sendall(rhead)
            if status != 100:
                # a final answer instead of 100 Continue: relay it, then close
                # as the client may or may not send its body
                _, rh = parse_head(rhead)
                self.relay_response_body(method, status, rh)
                self.drop_upstream()
                return False
        relay_body(cr, hdrs, up)
        while True:
            rhead = self.upr.head()
            if not rhead:
                raise Closed()
            status = int(rhead.split(b" ", 2)[1])
            self.request.sendall(rhead)
            if 100 <= status < 200:
                continue
            break
        _, rh = parse_head(rhead)
        eof = self.relay_response_body(method, status, rh)
        if eof or wants_close(rh, rhead.split(b" ", 1)[0].decode()):
            self.drop_upstream()
            return False
        return True

    def relay_response_body(self, method, status, rh):
        """Relay an answer's body; True when it ended with the connection."""
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return False
        if ("chunked" in rh.get("transfer-encoding", "").lower()
                or "content-length" in rh):
            relay_body(self.upr, rh, self.request)
            return False
        self.upr.until_eof(self.request)
        return True


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128


def main():
    ap = argparse.ArgumentParser(
        description="A fault-injecting HTTP reverse proxy for S3 tests.",
        epilog="see the head of this file for the plan's rules")

    class Plan(argparse.Action):
        def __call__(self, parser, ns, value, option=None):
            plan = getattr(ns, "plan", None) or []
            plan.append((self.dest, value))
            ns.plan = plan

    ap.add_argument("--upstream", default=os.environ.get("AWS_ENDPOINT_URL"),
                    help="http://HOST:PORT (default $AWS_ENDPOINT_URL)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file")
    ap.add_argument("--stats")
    ap.add_argument("--log")
    ap.add_argument("--control")
    for k in KINDS:
        ap.add_argument("--" + k, dest=k, type=int, action=Plan, metavar="N")
    ap.add_argument("--every", type=int, metavar="K")
    ap.add_argument("--delay-ms", type=int, default=0)
    ap.add_argument("--no-conditional", action="store_true")
    ap.set_defaults(plan=None)
    args = ap.parse_args()
    if not args.upstream:
        ap.error("--upstream or AWS_ENDPOINT_URL is needed")
    u = urllib.parse.urlsplit(args.upstream)
    if u.scheme != "http" or not u.hostname:
        ap.error("--upstream takes http://HOST:PORT")
    srv = Server(("127.0.0.1", args.port), Handler)
    srv.upstream = (u.hostname, u.port or 80)
    srv.no_conditional = args.no_conditional
    srv.faults = Faults(args)
    srv.faults.reread_control()
    srv.faults.write_stats()
    port = srv.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{port}\n")
        os.replace(tmp, args.port_file)
    sys.stdout.write(f"{port}\n")
    sys.stdout.flush()
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
