"""A local HTTP server that answers as the Hugging Face hub does, for the pull
tests (no network): a revision's information (`/api/models/REPO/revision/REV`,
with each file's size and hash, as `?blobs=true` gives them) and a file's
bytes (`/REPO/resolve/REV/FILE`, HEAD and GET, Range honoured, the headers
huggingface_hub reads: ETag or X-Linked-Etag, X-Repo-Commit, X-Linked-Size).
Faults a test arms: a transfer cut after some bytes, a flipped byte, a 429
with Retry-After, a private repository that needs a token. Every request is
logged with its time, method, path and Range."""

import hashlib
import json
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def git_blob_sha1(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    def __init__(self, files, lfs=(), token=None):
        """files: {name: bytes}; lfs: the names stored as LFS files (hashed by SHA-256, as the hub's large files are)."""
        self.files = dict(files)
        self.lfs = set(lfs)
        self.token = token
        self.commit = hashlib.sha1(json.dumps(sorted((n, hashlib.sha256(b).hexdigest()) for n, b in self.files.items())).encode()).hexdigest()

    def hash_of(self, name):
        data = self.files[name]
        return hashlib.sha256(data).hexdigest() if name in self.lfs else git_blob_sha1(data)


class MockHub:
    def __init__(self, certificate=None):
        """certificate: (cert file, key file) to answer over HTTPS."""
        self.repos = {}
        self.log = []
        self.cut_after = {}        # (repo, file) -> bytes sent before the connection is closed, once
        self.corrupt = set()       # (repo, file): one byte flipped in what is sent
        self.rate_limited = {}     # path prefix -> Retry-After seconds, for the next request under it
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.answer(self, head=True)

            def do_GET(self):
                hub.answer(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if certificate:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*certificate)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"{'https' if certificate else 'http'}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def add(self, repo_id, repo):
        self.repos[repo_id] = repo
        return repo

    def gets(self, file=None):
        """The GETs of files logged (of one file, when named)."""
        return [e for e in self.log if e["method"] == "GET" and "/resolve/" in e["path"] and (file is None or e["path"].endswith("/" + file))]

    def send(self, handler, status, body=b"", headers=None, head=False):
        handler.send_response(status)
        for k, v in (headers or {}).items():
            handler.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if not head:
            handler.wfile.write(body)

    def answer(self, handler, head):
        path = urllib.parse.urlsplit(handler.path).path
        self.log.append({"time": time.time(), "method": "HEAD" if head else "GET", "path": path, "range": handler.headers.get("Range")})
        for prefix, seconds in list(self.rate_limited.items()):
            if path.startswith(prefix):
                del self.rate_limited[prefix]
                return self.send(handler, 429, b'{"error": "rate limited"}', {"Retry-After": str(seconds)}, head)
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            return self.revision_info(handler, "/".join(parts[2:4]), head)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve(handler, "/".join(parts[:2]), "/".join(parts[4:]), head)
        return self.send(handler, 404, b'{"error": "no such route"}', head=head)

    def authorized(self, handler, repo):
        return repo.token is None or handler.headers.get("Authorization") == f"Bearer {repo.token}"

    def revision_info(self, handler, repo_id, head):
        repo = self.repos.get(repo_id)
        if repo is None:
            return self.send(handler, 404, b'{"error": "Repository not found"}', head=head)
        if not self.authorized(handler, repo):
            return self.send(handler, 401, b'{"error": "Invalid credentials"}', head=head)
        siblings = []
        for name, data in sorted(repo.files.items()):
            entry = {"rfilename": name, "size": len(data), "blobId": git_blob_sha1(data)}
            if name in repo.lfs:
                entry["lfs"] = {"sha256": repo.hash_of(name), "size": len(data), "pointerSize": 134}
            siblings.append(entry)
        body = json.dumps({"id": repo_id, "sha": repo.commit, "siblings": siblings}).encode()
        return self.send(handler, 200, body, {"Content-Type": "application/json"}, head)

    def resolve(self, handler, repo_id, name, head):
        repo = self.repos.get(repo_id)
        if repo is None or not self.authorized(handler, repo):
            return self.send(handler, 404 if repo is None else 401, b"", head=head)
        if name not in repo.files:
            return self.send(handler, 404, b'{"error": "Entry not found"}', head=head)
        data = repo.files[name]
        if (repo_id, name) in self.corrupt:
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x10]) + data[len(data) // 2 + 1:]
        etag = repo.hash_of(name)
        headers = {"X-Repo-Commit": repo.commit, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if name in repo.lfs:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))})
        start, status = 0, 200
        wanted = handler.headers.get("Range")
        if wanted and wanted.startswith("bytes=") and wanted.endswith("-"):
            start, status = int(wanted[6:-1]), 206
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        body = data[start:]
        cut = self.cut_after.pop((repo_id, name), None) if not head else None
        if cut is None:
            return self.send(handler, status, body, headers, head)
        # The whole length promised, part of it sent, the connection closed: a download cut mid-file.
        handler.send_response(status)
        for k, v in headers.items():
            handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:cut])
        handler.wfile.flush()
        handler.close_connection = True
