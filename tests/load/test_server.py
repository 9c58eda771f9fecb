"""A small, controllable HTTP server for testing `kiln load` (Python standard library only).

Every behaviour is chosen per request, so one server serves every test:

  GET|POST /delay?ms=N            200 "ok" N ms after the request line arrived
  GET|POST /stall?ms=N&at=A&for=F&key=K
                                  like /delay, but the server "freezes" for F seconds starting A
                                  seconds after the first request with this key: a request arriving
                                  in the freeze waits until it ends (a planted stall)
  GET|POST /queue?ms=N            200 "ok" after N ms of service by a single worker: requests queue
                                  behind each other, so the server saturates at 1000/N requests/s
  GET|POST /status?code=C         an empty response with status C
  GET      /garbage               bytes that are not HTTP, then the connection is closed
  GET      /metrics               Prometheus text with a GPU-utilization gauge per GPU
  GET      /v1/models             {"data": [{"id": "test-model"}]}
  POST     [/malformed]/v1/chat/completions, [/malformed]/v1/completions
                                  OpenAI-compatible. Planted timings come from the request body:
                                  "ttft_ms" (first token), "itl_ms" (between tokens), and
                                  "max_tokens" tokens of "tok " are generated; "usage": false leaves
                                  usage out. Streaming sends one SSE chunk per token, a usage chunk
                                  when stream_options.include_usage, then [DONE]. Under /malformed
                                  the 200 response is not valid for the API.
  GET      /v2/models/NAME        KServe v2 metadata: input "x" FP32 [-1, 4], output "y"
  POST     /v2/models/NAME/infer  KServe v2 inference, JSON or binary extension; 400 when the input
                                  does not match the metadata

Run: python test_server.py [--port P]; it prints "PORT <p>" once it listens.
"""
import argparse
import json
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

STALLS = {}  # key -> time of the first request
STALLS_LOCK = threading.Lock()
QUEUE_LOCK = threading.Lock()  # the single worker of /queue


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # many connections open at once in open-loop tests


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, fmt, *args):
        pass

    def parse_request(self):
        self.arrival = time.monotonic()  # planted delays count from here, not after header parsing
        return super().parse_request()

    def sleep_until(self, seconds_after_arrival):
        """Sleeps until the given time after the request arrived (at once when that has passed)."""
        left = self.arrival + seconds_after_arrival - time.monotonic()
        if left > 0:
            time.sleep(left)

    # ------------------------------------------------------------------ helpers
    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send(self, code, body=b"", ctype="text/plain", headers=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def send_json(self, code, obj):
        self.send(code, json.dumps(obj).encode(), "application/json")

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    # ------------------------------------------------------------------ dispatch
    def do_GET(self):
        self.route(b"")

    def do_POST(self):
        self.route(self.read_body())

    def route(self, body):
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        path = url.path
        if path == "/delay":
            self.sleep_until(float(q.get("ms", 0)) / 1e3)
            return self.send(200, b"ok")
        if path == "/queue":
            with QUEUE_LOCK:
                time.sleep(float(q.get("ms", 0)) / 1e3)
            return self.send(200, b"ok")
        if path == "/stall":
            return self.stall(q)
        if path == "/status":
            return self.send(int(q.get("code", 500)))
        if path == "/garbage":
            self.wfile.write(b"this is not HTTP\r\n\r\n")
            self.close_connection = True
            return
        if path == "/metrics":
            return self.metrics()
        if path == "/v1/models":
            return self.send_json(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})
        malformed = path.startswith("/malformed/")
        if malformed:
            path = path[len("/malformed"):]
        if path in ("/v1/chat/completions", "/v1/completions"):
            return self.openai(body, chat=path.endswith("chat/completions"), malformed=malformed)
        if path.startswith("/v2/models/"):
            return self.kserve(path, body)
        self.send(404, b"not found")

    def stall(self, q):
        key = q.get("key", "")
        now = time.monotonic()
        with STALLS_LOCK:
            t0 = STALLS.setdefault(key, now)
        start, end = t0 + float(q.get("at", 1)), t0 + float(q.get("at", 1)) + float(q.get("for", 1))
        if start <= now < end:
            time.sleep(end - now)
        time.sleep(float(q.get("ms", 0)) / 1e3)
        self.send(200, b"ok")

    def metrics(self):
        t = time.time()
        text = ("# HELP kiln_gpu_utilization GPU utilization in percent\n"
                "# TYPE kiln_gpu_utilization gauge\n"
                'kiln_gpu_utilization{gpu="0",name="H200 {test}"} 40\n'
                'kiln_gpu_utilization{gpu="1"} 60\n'
                "# TYPE kiln_requests_total counter\n"
                f"kiln_requests_total {int(t)}\n")
        self.send(200, text.encode(), "text/plain; version=0.0.4")

    # ------------------------------------------------------------------ OpenAI
    def openai(self, body, chat, malformed):
        try:
            req = json.loads(body)
        except ValueError:
            return self.send_json(400, {"error": {"message": "body is not JSON"}})
        n = int(req.get("max_tokens", 16))
        ttft, itl = float(req.get("ttft_ms", 0)) / 1e3, float(req.get("itl_ms", 0)) / 1e3
        usage = {"prompt_tokens": len(str(req.get("prompt", req.get("messages", ""))).split()),
                 "completion_tokens": n, "total_tokens": 0} if req.get("usage", True) else None
        if not req.get("stream"):
            time.sleep(ttft + itl * max(n - 1, 0))
            if malformed:
                return self.send(200, b'{"choices": "not a list"', "application/json")
            text = "tok " * n
            choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
            out = {"id": "x", "object": "chat.completion" if chat else "text_completion", "choices": [choice]}
            if usage:
                out["usage"] = usage
            return self.send_json(200, out)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        time.sleep(ttft)
        for i in range(n):
            if i:
                time.sleep(itl)
            delta = {"index": 0, "delta": {"content": "tok "}} if chat else {"index": 0, "text": "tok "}
            if malformed:
                self.chunk(b"data: {broken json\n\n")
            else:
                self.chunk(b"data: " + json.dumps({"id": "x", "choices": [delta]}).encode() + b"\n\n")
        if usage and (req.get("stream_options") or {}).get("include_usage"):
            self.chunk(b"data: " + json.dumps({"id": "x", "choices": [], "usage": usage}).encode() + b"\n\n")
        if not malformed:
            self.chunk(b"data: [DONE]\n\n")
        self.chunk(b"")

    # ------------------------------------------------------------------ KServe v2
    def kserve(self, path, body):
        parts = path.strip("/").split("/")  # v2 models NAME [infer]
        name = parts[2] if len(parts) > 2 else ""
        meta = {"name": name, "platform": "test", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
                "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}]}
        if len(parts) == 3 and self.command == "GET":
            return self.send_json(200, meta)
        if len(parts) != 4 or parts[3] != "infer":
            return self.send(404, b"not found")
        hlen = self.headers.get("Inference-Header-Content-Length")
        header = body[:int(hlen)] if hlen else body
        try:
            req = json.loads(header)
            inp = req["inputs"][0]
            shape = inp["shape"]
            count = shape[0] * shape[1]
            if hlen:
                raw = body[int(hlen):]
                if len(raw) != inp["parameters"]["binary_data_size"] or len(raw) != 4 * count:
                    raise ValueError("binary size")
                values = list(struct.unpack("<%df" % count, raw))
            else:
                values = inp["data"]
                if len(values) != count:
                    raise ValueError("data size")
            if inp["name"] != "x" or inp["datatype"] != "FP32" or len(shape) != 2 or shape[1] != 4:
                raise ValueError("input does not match the metadata")
        except (ValueError, KeyError, IndexError, TypeError) as e:
            return self.send_json(400, {"error": str(e)})
        out = {"name": "y", "datatype": "FP32", "shape": shape}
        binary = any((o.get("parameters") or {}).get("binary_data") for o in req.get("outputs", []))
        if not binary:
            out["data"] = [2 * v for v in values]
            return self.send_json(200, {"model_name": name, "outputs": [out]})
        raw = struct.pack("<%df" % count, *[2 * v for v in values])
        out["parameters"] = {"binary_data_size": len(raw)}
        head = json.dumps({"model_name": name, "outputs": [out]}).encode()
        self.send(200, head + raw, "application/octet-stream", [("Inference-Header-Content-Length", str(len(head)))])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    server = Server(("127.0.0.1", args.port), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
