"""Real object-store servers on 127.0.0.1 for the remote tests (tests/test_remote.py).

* S3: moto's server (``python -m moto.server``, test extra ``moto[server]``) in its own
  process, with IAM enforced (``INITIAL_NO_AUTH_ACTION_COUNT``: the first requests, which make
  the users, are the only unauthenticated ones): a ``writer`` (s3:*) that fills the buckets, a
  ``reader`` (s3:GetObject and s3:ListBucket, and their operations' own names for moto 5.2.6, only:
  traceview could write nothing if it tried)
  and ``nobody`` (no policy: every request denied).
* GCS: ``gcp-storage-emulator`` (test extra) in its own process, in memory.

Each server logs one line per request to a file: :meth:`Server.requests` counts them.
:class:`CutProxy` sits between a client and a server and ends every connection after a
number of bytes from the server (an object cut short mid-read).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on port {port} did not start in {timeout:.0f} s")


class Server:
    """A server process on 127.0.0.1:``port`` whose request log is ``log``."""

    def __init__(self, argv: list[str], port: int, log: Path, env: dict | None = None):
        self.port, self.log = port, log
        self.fh = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self.fh, stderr=subprocess.STDOUT, env=env or os.environ.copy())
        wait_port(port, self.proc, log)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self, pattern: str = "") -> list[str]:
        """The logged request lines (``"METHOD /path HTTP/1.1" status``) matching ``pattern``."""
        self.fh.flush()
        lines = re.findall(r'"([A-Z]+ \S+ HTTP/[\d.]+)" (\d{3})', self.log.read_text(errors="replace"))
        return [f"{r} {s}" for r, s in lines if re.search(pattern, r)]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.fh.close()


# ------------------------------------------------------------------------------------------ S3

#: IAM actions made before authentication is enforced (the users and their keys)
_IAM_SETUP_ACTIONS = 8

#: (AWS authorises ListObjects/ListObjectsV2 as s3:ListBucket and HeadObject as s3:GetObject;
#: moto 5.2.6 checks them under their operation names, so those are granted too: still no
#: action that writes)
_READ_ONLY = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["s3:GetObject", "s3:HeadObject", "s3:ListBucket", "s3:ListObjects",
                                   "s3:ListObjectsV2"], "Resource": "*"}]}
_ALL = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


def _spec(tmp: Path, port: int, buckets: dict) -> str:
    """Write the objects a server starts with ({bucket: {key: bytes or Path}}) as JSON for
    its launcher; returns the file's path."""
    spec = {b: {k: (["path", str(v)] if isinstance(v, Path) else ["hex", bytes(v).hex()]) for k, v in files.items()}
            for b, files in buckets.items()}
    p = tmp / f"spec-{port}.json"
    p.write_text(json.dumps(spec))
    return str(p)


#: moto's server with its S3 backend filled first (straight into the backend: thousands of
#: objects in a fraction of a second, where PUTs take seconds), then ``moto.server.main``
_MOTO = """
import json, sys
from pathlib import Path
from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
be = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
for b, files in json.load(open(sys.argv[1])).items():
    be.create_bucket(b, "us-east-1")
    for k, (how, v) in files.items():
        be.put_object(b, k, Path(v).read_bytes() if how == "path" else bytes.fromhex(v))
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[2]])
"""

#: gcp-storage-emulator in memory with its buckets filled first (its own object resources,
#: checksums included), then served
_GCS = """
import json, logging, sys
from pathlib import Path
from gcp_storage_emulator.handlers import buckets, objects
from gcp_storage_emulator.server import create_server
logging.basicConfig(level=logging.INFO, format="%(message)s")
port = int(sys.argv[2])
srv = create_server("127.0.0.1", port, in_memory=True)
st = srv._storage
for b, files in json.load(open(sys.argv[1])).items():
    buckets.create_bucket(b, st)
    for k, (how, v) in files.items():
        data = Path(v).read_bytes() if how == "path" else bytes.fromhex(v)
        obj = objects._make_object_resource(f"http://127.0.0.1:{port}", b, k, "application/octet-stream", str(len(data)))
        obj = objects._checksums(data, obj)
        st._store.write_bytes(st._object_path(b, k), data)
        st.objects.setdefault(b, {})[k] = obj
st._write_config_to_file()
srv.run()
"""


class S3(Server):
    """moto's S3 with IAM enforced; ``keys[user] = (access key id, secret)``; ``buckets``:
    the objects it starts with ({bucket: {key: bytes or Path}})."""

    def __init__(self, tmp: Path, buckets: dict | None = None, auth: bool = True):
        port = free_port()
        env = os.environ.copy()
        if auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = str(_IAM_SETUP_ACTIONS)
        super().__init__([sys.executable, "-c", _MOTO, _spec(tmp, port, buckets or {}), str(port)], port,
                         tmp / f"moto-{port}.log", env)
        import boto3

        self.keys = {}
        kw = dict(endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id="setup",
                  aws_secret_access_key="setup")
        if auth:
            iam = boto3.client("iam", **kw)
            for user, policy in (("writer", _ALL), ("reader", _READ_ONLY), ("nobody", None)):
                iam.create_user(UserName=user)
                if policy is not None:
                    iam.put_user_policy(UserName=user, PolicyName="p", PolicyDocument=json.dumps(policy))
                k = iam.create_access_key(UserName=user)["AccessKey"]
                self.keys[user] = (k["AccessKeyId"], k["SecretAccessKey"])
        else:
            self.keys = {u: ("open", "open") for u in ("writer", "reader", "nobody")}

    def env(self, user: str = "reader", endpoint: str | None = None) -> dict:
        """The environment a client of this server needs (botocore's own variables)."""
        key, secret = self.keys[user]
        return {"AWS_ENDPOINT_URL": endpoint or self.endpoint, "AWS_ACCESS_KEY_ID": key,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}

    def client(self, user: str = "writer"):
        import boto3

        key, secret = self.keys[user]
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id=key,
                            aws_secret_access_key=secret)

    def put(self, bucket: str, files: dict) -> None:
        """Create ``bucket`` (if new) holding ``files`` ({key: bytes or Path}) as the writer."""
        import s3fs

        key, secret = self.keys["writer"]
        fs = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=self.endpoint, skip_instance_cache=True,
                               client_kwargs={"region_name": "us-east-1"})
        c = self.client("writer")
        if bucket not in [b["Name"] for b in c.list_buckets().get("Buckets", [])]:
            c.create_bucket(Bucket=bucket)
        fs.pipe({f"{bucket}/{k}": (v.read_bytes() if isinstance(v, Path) else v) for k, v in files.items()})


# ----------------------------------------------------------------------------------------- GCS

class GCS(Server):
    """gcp-storage-emulator, in memory; ``buckets``: the objects it starts with."""

    def __init__(self, tmp: Path, buckets: dict | None = None):
        port = free_port()
        super().__init__([sys.executable, "-c", _GCS, _spec(tmp, port, buckets or {}), str(port)], port,
                         tmp / f"gcs-{port}.log")

    def env(self, endpoint: str | None = None) -> dict:
        # NO_GCE_CHECK: google-auth's credential chain skips the metadata-server probe (no GCE here)
        return {"STORAGE_EMULATOR_HOST": endpoint or self.endpoint, "GOOGLE_APPLICATION_CREDENTIALS": "",
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "NO_GCE_CHECK": "True"}

    def put(self, bucket: str, files: dict) -> None:
        import gcsfs

        fs = gcsfs.GCSFileSystem(endpoint_url=self.endpoint, token="anon", skip_instance_cache=True)
        if not fs.exists(bucket):
            fs.mkdir(bucket)
        fs.pipe({f"{bucket}/{k}": (v.read_bytes() if isinstance(v, Path) else v) for k, v in files.items()})


# --------------------------------------------------------------------------------------- proxy

class CutProxy:
    """A TCP proxy on 127.0.0.1 to ``port`` that ends each connection once ``limit`` bytes of
    the server's answers went through it (responses larger than that are cut short);
    ``on_cut`` (no argument) is called at each cut, before the connection ends."""

    def __init__(self, port: int, limit: int, on_cut=None):
        self.target, self.limit, self.on_cut = port, limit, on_cut
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.cuts = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                s = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                c.close()
                continue
            threading.Thread(target=self._pipe, args=(c, s, None), daemon=True).start()
            threading.Thread(target=self._pipe, args=(s, c, self.limit), daemon=True).start()

    def _pipe(self, src, dst, limit):
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if limit is not None and sent + len(data) > limit:
                    dst.sendall(data[: limit - sent])
                    self.cuts += 1
                    if self.on_cut is not None:
                        self.on_cut()
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self._stop = True
        self.sock.close()
