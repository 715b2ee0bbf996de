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
  --echo N       answer 400 with an <Error> whose Message echoes the
                 request's session token and headers (the credentials
                 first), one per line, as a chatty server does (a HEAD,
                 which has no body to say it in, gets 200)
By default the first requests take the plan (--slowdown 2 --reset 1:
requests 1-2 get 503, request 3 is reset, the rest pass).  --every K
gives it to every K-th request instead (K, 2K, ...); there a count of 0
means without end.  --delay-ms D holds each request (each K-th with
--every) D ms before it is handled.

--no-conditional answers every request that carries If-None-Match with
501 NotImplemented, as a server without conditional writes does.

--drip-ms D relays the body of every answer it forwards one byte each D
ms: a server that never stops, never goes idle and never finishes.
--object-size N says every object (a key in the path) it forwards a
HEAD or a GET of is N bytes long (Content-Length): a GET's body is the
object's, then zeros up to N.

--listing MODE answers the listings with a delimiter (a root's top
level) itself, as a hostile or broken server might, and a listing of a
dir it named with an empty page; every other request is forwarded:
  loop      one page of 1,000 dirs again and again, under tokens that
            alternate between two values
  dirs:N    N rank dirs, in order, 1,000 a page
  endless   rank dirs in order, 1,000 a page, without end
  huge      one page of 9 MiB (a comment pads it)

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

KINDS = ("slowdown", "error500", "reset", "echo")


class Faults:
    """The plan and the counters, shared by all connections."""

    def __init__(self, args):
        self.lock = threading.Lock()
        self.control = args.control
        self.control_text = ""     # a missing file leaves the flags' plan
        self.stats_path = args.stats
        self.log_path = args.log
        self.counts = {"requests": 0, "forwarded": 0, "slowdown": 0,
                       "error500": 0, "reset": 0, "echo": 0, "delayed": 0,
                       "upstream_errors": 0, "inflight_max": 0, "listed": 0}
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


class Drip:
    """A socket's sendall, one byte each delay seconds."""

    def __init__(self, sock, delay):
        self.sock = sock
        self.delay = delay

    def sendall(self, data):
        for i in range(len(data)):
            self.sock.sendall(data[i:i + 1])
            time.sleep(self.delay)


def with_length(rhead, n):
    """An answer's head saying Content-Length n."""
    lines = [ln for ln in rhead[:-4].split(b"\r\n")
             if not ln.lower().startswith(b"content-length:")]
    return b"\r\n".join(lines + [f"Content-Length: {n}".encode()]) + b"\r\n\r\n"


def wants_close(hdrs, version):
    conn = hdrs.get("connection", "").lower()
    return "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)


def relay_body(reader, hdrs, out):
    if "chunked" in hdrs.get("transfer-encoding", "").lower():
        reader.chunked(out)
    elif "content-length" in hdrs:
        reader.exact(int(hdrs["content-length"]), out)


def xml_text(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def error_response(status, reason, code, message, method):
    rid = os.urandom(8).hex()
    body = ('<?xml version="1.0" encoding="UTF-8"?>'
            f"<Error><Code>{code}</Code><Message>{xml_text(message)}</Message>"
            f"<RequestId>{rid}</RequestId><HostId>faultproxy</HostId></Error>").encode()
    head = (f"HTTP/1.1 {status} {reason}\r\n"
            "Content-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"x-amz-request-id: {rid}\r\n"
            "Connection: close\r\n\r\n").encode()
    return head if method == "HEAD" else head + body


def xml_response(body):
    body = ('<?xml version="1.0" encoding="UTF-8"?>' + body).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


def listing_page(prefix, dirs, token):
    """A ListObjectsV2 page naming dirs; truncated when token is set."""
    parts = [f'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
             f"<Name>b</Name><Prefix>{xml_text(prefix)}</Prefix>"
             f"<KeyCount>{len(dirs)}</KeyCount><MaxKeys>1000</MaxKeys>"
             f"<Delimiter>/</Delimiter>"
             f"<IsTruncated>{'true' if token else 'false'}</IsTruncated>"]
    if token:
        parts.append(f"<NextContinuationToken>{token}</NextContinuationToken>")
    parts += [f"<CommonPrefixes><Prefix>{xml_text(d)}</Prefix></CommonPrefixes>"
              for d in dirs]
    parts.append("</ListBucketResult>")
    return "".join(parts)


class Listings:
    """--listing MODE: the top levels' pages, made up."""
    PAGE = 1000

    def __init__(self, mode):
        self.mode, _, n = mode.partition(":")
        if self.mode not in ("loop", "dirs", "endless", "huge"):
            raise ValueError(f"--listing {mode}: loop, dirs:N, endless or huge")
        self.count = int(n) if self.mode == "dirs" else None

    @staticmethod
    def name(prefix, i):
        # a rank dir of a made-up model; rank digits fixed in width keep
        # the names in the order of i
        return f"{prefix}kvtest_model-9_0123456789ab_r{i:09d}/"

    def answer(self, query):
        """The page for a listing's query, or None to forward it."""
        q = urllib.parse.parse_qs(query, keep_blank_values=True)
        prefix = q.get("prefix", [""])[0]
        if "delimiter" not in q:
            if "kvtest_model-9_" in prefix:
                return listing_page(prefix, [], None)
            return None
        # vLLM's top level "PREFIX//" only: the other is forwarded
        if not prefix.endswith("//") and prefix != "/":
            return None
        token = q.get("continuation-token", [None])[0]
        page = int(token[1:]) if token and token[1:].isdigit() else 0
        if self.mode == "huge":
            return "<!--" + " " * (9 << 20) + "-->" + listing_page(prefix, [], None)
        if self.mode == "loop":
            dirs = [self.name(prefix, i) for i in range(self.PAGE)]
            return listing_page(prefix, dirs, "B" if token == "A" else "A")
        lo = page * self.PAGE
        hi = lo + self.PAGE if self.count is None else min(lo + self.PAGE, self.count)
        dirs = [self.name(prefix, i) for i in range(lo, hi)]
        more = self.count is None or hi < self.count
        return listing_page(prefix, dirs, f"p{page + 1}" if more else None)


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
            if kind == "echo":
                if method == "HEAD":
                    resp = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                else:
                    # the credentials first, where a cut message keeps them
                    lines = head.decode("latin-1").split("\r\n")[1:]
                    lines.sort(key=lambda ln: not ln.lower().startswith(
                        ("x-amz-security-token", "authorization")))
                    resp = error_response(
                        400, "Bad Request", "InvalidRequest",
                        "The security token included in the request is invalid: "
                        + hdrs.get("x-amz-security-token", "") + ". Your headers: "
                        + "\n".join(lines), method)
            elif kind == "slowdown":
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
        listings = self.server.listings
        target = first.split(" ")[1] if " " in first else ""
        page = listings.answer(urllib.parse.urlsplit(target).query) \
            if listings and method == "GET" and "list-type=2" in target else None
        if page is not None:
            faults.note("listed")
            faults.log(f"{n} {first} listed")
            c.sendall(xml_response(page))
            return not wants_close(hdrs, version)
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
        # a key in the path: "/bucket/key...", not "/bucket" or "/bucket/"
        path = urllib.parse.urlsplit(head.split(b" ", 2)[1].decode("latin-1")).path
        is_object = len(path.lstrip("/").split("/", 1)) > 1 and \
            path.lstrip("/").split("/", 1)[1] != ""
        while True:
            rhead = self.upr.head()
            if not rhead:
                raise Closed()
            status = int(rhead.split(b" ", 2)[1])
            grow = (method in ("HEAD", "GET") and 200 <= status < 300 and is_object
                    and self.server.object_size is not None)
            if not grow:
                self.request.sendall(rhead)
            if 100 <= status < 200:
                continue
            break
        _, rh = parse_head(rhead)
        if grow:
            return self.grow(method, rhead, rh)
        eof = self.relay_response_body(method, status, rh)
        if eof or wants_close(rh, rhead.split(b" ", 1)[0].decode()):
            self.drop_upstream()
            return False
        return True

    def grow(self, method, rhead, rh):
        """Relay an object's answer as --object-size long; False to close."""
        n = self.server.object_size
        self.request.sendall(with_length(rhead, n))
        if method == "HEAD":
            return True
        have = int(rh.get("content-length", "0"))
        self.upr.exact(min(have, n), self.request)
        if have > n:
            self.upr.exact(have - n, None)
        zeros = bytes(1 << 20)
        left = n - min(have, n)
        while left > 0:
            self.request.sendall(zeros[:min(left, len(zeros))])
            left -= min(left, len(zeros))
        return True

    def relay_response_body(self, method, status, rh):
        """Relay an answer's body; True when it ended with the connection."""
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            return False
        out = self.request
        if self.server.drip_ms:
            out = Drip(out, self.server.drip_ms / 1000.0)
        if ("chunked" in rh.get("transfer-encoding", "").lower()
                or "content-length" in rh):
            relay_body(self.upr, rh, out)
            return False
        self.upr.until_eof(out)
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
    ap.add_argument("--drip-ms", type=int, default=0, metavar="D")
    ap.add_argument("--object-size", type=int, metavar="N")
    ap.add_argument("--listing", metavar="MODE")
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
    srv.drip_ms = args.drip_ms
    srv.object_size = args.object_size
    try:
        srv.listings = Listings(args.listing) if args.listing else None
    except ValueError as e:
        ap.error(str(e))
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
