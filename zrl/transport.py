"""ZeroMQ sockets under zrl's rules.

Every socket sets LINGER=0 and explicit high-water marks; every receive polls with a timeout so that
the caller can check whether it should stop. One context per process, made after spawn. Local
endpoints are unix sockets in the run's private folder (mode 0700) or tcp on 127.0.0.1.

With ``transport.curve_keys`` (a folder ``zrl-keys`` made) every socket speaks CurveZMQ: a bound socket
is a CURVE server with the run's server key, and a context that binds runs a ZAP authenticator that
admits only the run's own client key (its roles'), or, for the ingest's gate and weights, the client keys in
``<folder>/authorized`` as that folder is now (remote workers'); a connecting socket is a CURVE client with the
client key. A process picks its keys once (:func:`configure`), so every socket it makes, its crash report's
included, uses them. Traffic is encrypted, and a peer without an authorized key gets no message through.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
import zmq.utils.z85
from zmq.auth.thread import ThreadAuthenticator

from zrl.config import ConfigError, TransportConfig
from zrl.protocol import MAX_MESSAGE_BYTES

ENDPOINT_NAMES = ("unrolls", "batches", "credits", "weights", "weights_req", "stats", "priorities", "evaluations")


@dataclass(frozen=True)
class Endpoints:
    """The addresses of one run's sockets; the launcher picks them, every role connects or binds."""

    unrolls: str  # workers PUSH -> broker PULL (bind)
    batches: str  # broker PUSH -> learner PULL (bind)
    credits: str  # learner PUSH -> broker PULL (bind): room for more batches
    weights: str  # learner PUB (bind) -> workers SUB
    weights_req: str  # workers DEALER -> learner ROUTER (bind): current weights on (re)start
    stats: str  # every role PUSH -> launcher PULL (bind): stats, heartbeats, episodes
    priorities: str  # Ape-X: learner PUSH -> broker PULL (bind): the trained transitions' new priorities
    evaluations: str = ""  # launcher PUSH (bind) -> evaluator PULL: eval.interval_frames' requests
    gate: str = ""  # remote workers DEALER -> ingest ROUTER (bind, tcp): a run with workers.remote
    remote_weights: str = ""  # ingest PUB (bind, tcp) -> remote workers SUB: the learner's weights, passed on


CURVE_FILES = ("server.key", "server.key_secret", "client.key", "client.key_secret")


@dataclass(frozen=True)
class CurveKeys:
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes
    authorized: str  # folder of the client public keys a server admits


def make_curve_keys(folder: str) -> None:
    """A new key folder: server and client certificates (secret files mode 0600) and ``authorized/`` with the
    client's public key. The folder must not exist yet (keys are never overwritten); a failed attempt
    leaves nothing behind."""
    if not zmq.has("curve"):
        raise ConfigError("this libzmq was built without CURVE; install pyzmq's wheel, which has it")
    root = Path(folder)
    root.mkdir(mode=0o700, parents=True)
    try:
        for name in ("server", "client"):
            public, secret = zmq.auth.create_certificates(str(root), name)
            os.chmod(public, 0o644)  # whatever the umask: load_curve_keys refuses files others may write
            os.chmod(secret, 0o600)
        (root / "authorized").mkdir(mode=0o700)
        (root / "authorized" / "client.key").write_bytes((root / "client.key").read_bytes())
        os.chmod(root / "authorized" / "client.key", 0o644)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def make_client_keys(folder: str, name: str) -> Path:
    """A key pair for one remote worker host, ``<folder>/clients/<name>/`` (its client certificate and a copy of
    the server's public key: what that host's zrl-worker --keys needs), authorized by
    ``<folder>/authorized/<name>.key``; deleting that file revokes it. The folder is one zrl-keys made; the
    client's folder, returned, is to be copied to the host."""
    if not CLIENT_NAME.fullmatch(name) or name == "client":
        raise ConfigError(
            f"zrl-keys --client: {name!r} is not a usable name (letters, digits, '_', '.' and '-', not 'client')"
        )
    root = Path(folder).expanduser()
    load_curve_keys(str(root))  # a server folder, whole and private
    authorized = root / "authorized" / f"{name}.key"
    target = root / "clients" / name
    if authorized.exists() or target.exists():
        raise ConfigError(f"zrl-keys --client: {name!r} exists already ({target}); give another name")
    (root / "clients").mkdir(mode=0o700, exist_ok=True)
    target.mkdir(mode=0o700)
    try:
        public, secret = zmq.auth.create_certificates(str(target), "client")
        os.chmod(secret, 0o600)
        (target / "server.key").write_bytes((root / "server.key").read_bytes())
        authorized.write_bytes((target / "client.key").read_bytes())
        for path in (public, target / "server.key", authorized):
            os.chmod(path, 0o644)  # whatever the umask: the loaders refuse files others may write
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        authorized.unlink(missing_ok=True)
        raise
    return target


def _z85_key(path: Path, key: bytes | None, what: str) -> bytes:
    """A CurveZMQ key as it must be: 40 Z85 characters, 32 bytes decoded."""
    try:
        if key is not None and len(key) == 40 and len(zmq.utils.z85.decode(key)) == 32:
            return key
    except (ValueError, KeyError, TypeError):
        pass
    raise ConfigError(
        f"transport.curve_keys: {path} holds no valid {what} key (40 Z85 characters); make the "
        "folder again with zrl-keys"
    )


def load_curve_keys(folder: str) -> CurveKeys:
    """The keys of a folder ``make_curve_keys`` made; ConfigError naming the file that is missing, unreadable,
    readable by others, or not a key."""
    key = "transport.curve_keys"
    root = _key_folder(folder, key, f"zrl-keys {Path(folder).expanduser()}")
    keys = _load_certificates(root, CURVE_FILES, key)
    authorized = root / "authorized"
    _entry(authorized, key)  # others who could write here could admit themselves
    clients = sorted(authorized.glob("*.key")) if authorized.is_dir() else []
    if not clients:
        raise ConfigError(f"{key}: {authorized} holds no client public key (*.key); a server would admit no one")
    for path in clients:
        _entry(path, key)
        try:
            public, _ = zmq.auth.load_certificate(str(path))
        except (OSError, ValueError) as err:
            raise ConfigError(f"{key}: {path}: not a readable CurveZMQ certificate ({err})") from None
        _z85_key(path, public, "public")
    return CurveKeys(
        keys["server.key"], keys["server.key_secret"], keys["client.key"], keys["client.key_secret"], str(authorized)
    )


def _key_folder(folder: str, key: str, how: str) -> Path:
    """``folder`` as a Path, once this libzmq has CURVE and the folder exists, is this user's and no one else may
    write to it; ConfigError under ``key`` saying ``how`` to make one otherwise."""
    if not zmq.has("curve"):
        raise ConfigError(f"{key}: this libzmq was built without CURVE; install pyzmq's wheel, which has it")
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{key}: {root} is not a folder; make one with {how}")
    _check_private(root, root.stat(), key)
    return root


def _check_private(path: Path, st: os.stat_result, key: str, secret: bool = False) -> None:
    """A key folder or file only this user controls: owned by this user, and no one else may write to it (a secret
    key: nor read it). Another user's file, or one others can change, would let them choose who is admitted, or
    read the run's secret; mode bits alone do not say whose it is."""
    if st.st_uid != os.geteuid():
        raise ConfigError(f"{key}: {path} belongs to uid {st.st_uid}, not to this user; use a key folder of your own")
    if secret and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{key}: {path} can be read by other users; chmod 600 {path}")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"{key}: {path} can be written by other users, who could change it; chmod go-w {path}")


def _entry(path: Path, key: str, secret: bool = False) -> None:
    """An entry of a key folder: not a symlink (which could point at anyone's file), and private
    (``_check_private``); a missing one is left to the caller's error."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"{key}: {path} is a symbolic link; a key folder holds its own files (copy it in place)")
    _check_private(path, st, key, secret)


def _load_certificates(root: Path, names: tuple[str, ...], key: str) -> dict[str, bytes]:
    """The keys of ``names`` in ``root`` (``*_secret``: the secret key, which only its owner may read; the others:
    the public key); ConfigError under ``key`` naming the file that is missing, readable by others or no key."""
    keys: dict[str, bytes] = {}
    for name in names:
        path = root / name
        secret_file = name.endswith("_secret")
        _entry(path, key, secret_file)
        try:
            public, secret = zmq.auth.load_certificate(str(path))
        except (OSError, ValueError) as err:
            raise ConfigError(
                f"{key}: {path}: not a readable CurveZMQ certificate ({err}); make the folder with zrl-keys"
            ) from None
        keys[name] = _z85_key(path, secret, "secret") if secret_file else _z85_key(path, public, "public")
    return keys


CLIENT_FILES = ("server.key", "client.key", "client.key_secret")


def load_client_keys(folder: str, key: str = "--keys") -> CurveKeys:
    """A remote worker's keys: its client certificate and the server's public key (a folder zrl-keys --client
    made, or a whole key folder); ConfigError naming the file that is wrong."""
    root = _key_folder(folder, key, "zrl-keys --client NAME on the learner's host")
    keys = _load_certificates(root, CLIENT_FILES, key)
    return CurveKeys(keys["server.key"], b"", keys["client.key"], keys["client.key_secret"], "")


class AuthorizedKeys:
    """The client keys a server admits, read from its ``authorized/`` folder again at most every ``every_s``
    seconds, so that a key deleted there is refused from then on: by name (the file's stem) for each z85 public
    key, with the connections refused counted. Its ``callback`` is the ZAP authenticator's check
    (:func:`check_clients`), which runs in the authenticator's thread."""

    def __init__(self, folder: str, every_s: float = 1.0) -> None:
        self.folder, self.every_s = Path(folder), every_s
        self.names: dict[str, str] = {}
        self.refused = 0
        self._read_at = -float("inf")
        self.reload()

    def reload(self, now: float | None = None) -> dict[str, str]:
        """Read the folder again if it was read more than ``every_s`` ago; z85 key -> name."""
        now = time.monotonic() if now is None else now
        if now - self._read_at >= self.every_s:
            self._read_at = now
            names = {}
            try:
                for path in sorted(self.folder.glob("*.key")):
                    try:
                        _entry(path, "transport.curve_keys")  # a link or another user's key admits no one
                        public, _ = zmq.auth.load_certificate(str(path))
                    except (FileNotFoundError, ValueError, ConfigError):  # deleted meanwhile, or not a key
                        continue
                    if public:
                        names[public.decode("ascii")] = path.stem
            except OSError:  # the folder could not be read whole (no file left to open it with): keep what was read
                return self.names
            self.names = names
        return self.names

    def name_of(self, z85_key: str) -> str | None:
        return self.reload().get(z85_key)

    def callback(self, domain: str, z85_key: bytes) -> bool:
        allowed = self.name_of(z85_key.decode("ascii")) is not None
        if not allowed:
            self.refused += 1
        return allowed


def check_clients(ctx: zmq.Context, keys: AuthorizedKeys) -> None:
    """Have ``ctx``'s authenticator (a context that binds, with keys) admit the clients ``keys`` names, read anew
    as the folder changes, rather than the folder as it was when the context was made."""
    _authenticators[id(ctx)].configure_curve_callback(domain="*", credentials_provider=keys)


_curve: CurveKeys | None = None
_authenticators: dict[int, ThreadAuthenticator] = {}


def configure(cfg: TransportConfig) -> None:
    """This process's sockets from now on: CURVE with ``cfg.curve_keys``, plain without. Roles call it first
    thing, so that even a crash report sent before their context exists reaches the launcher."""
    global _curve
    _curve = load_curve_keys(cfg.curve_keys) if cfg.curve_keys else None


def configure_client(folder: str) -> None:
    """A remote worker's sockets from now on: CURVE clients with the keys of ``folder`` (:func:`load_client_keys`);
    plain with "" (a learner on loopback)."""
    global _curve
    _curve = load_client_keys(folder) if folder else None


def context(cfg: TransportConfig | None, binds: bool = True) -> zmq.Context:
    """This process's context, after :func:`configure` (``cfg`` None: keep what :func:`configure_client` set);
    with keys, a ZAP authenticator that admits only the authorized client keys to the sockets it binds
    (``binds``). Close with :func:`term`."""
    if cfg is not None:
        configure(cfg)
    ctx = zmq.Context()
    if _curve is not None and binds:
        auth = ThreadAuthenticator(ctx)
        auth.start()
        auth.configure_curve_callback(domain="*", credentials_provider=_OwnClient(_curve.client_public))
        _authenticators[id(ctx)] = auth
    return ctx


class _OwnClient:
    """The run's own sockets admit only the run's client key (its roles'): remote workers' keys, authorized for the
    ingest's gate (:func:`check_clients`), reach no other socket of the run."""

    def __init__(self, public: bytes) -> None:
        self.public = public

    def callback(self, domain: str, z85_key: bytes) -> bool:
        return z85_key == self.public


def term(ctx: zmq.Context) -> None:
    auth = _authenticators.pop(id(ctx), None)
    if auth is not None:
        auth.stop()
    ctx.term()


def make_private_dir(base: str, name: str) -> str:
    """A folder only this user can enter, for ipc socket files; short enough for unix socket paths."""
    path = os.path.join(base, name)
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)
    return path


def plan_endpoints(cfg: TransportConfig, private_dir: str) -> Endpoints:
    """ipc files in the private folder, or tcp ports on the bind host chosen by the OS now."""
    if cfg.kind == "ipc":
        return Endpoints(**{n: f"ipc://{os.path.join(private_dir, n)}" for n in ENDPOINT_NAMES})
    ports = free_ports(cfg.bind_host, len(ENDPOINT_NAMES))
    return Endpoints(**{n: f"tcp://{cfg.bind_host}:{p}" for n, p in zip(ENDPOINT_NAMES, ports)})


def free_ports(host: str, n: int) -> list[int]:
    """``n`` tcp ports the OS hands out now on ``host``; they are released at once for the roles to bind. Another
    program could take one in between: the role that binds then fails, and the run stops with its error."""
    ctx = zmq.Context()
    ports, probes = [], []
    try:
        for _ in range(n):
            sock = ctx.socket(zmq.PULL)
            sock.setsockopt(zmq.LINGER, 0)
            probes.append(sock)
            ports.append(sock.bind_to_random_port(f"tcp://{host}"))
    finally:
        for sock in probes:
            sock.close()
        ctx.term()
    return ports


def plan_remote(cfg: TransportConfig) -> tuple[str, str]:
    """Where the ingest binds for remote workers: the gate and the weights it passes on (the port after the gate's
    when ``remote_port`` is fixed, a ConfigError if either is taken; ports the OS picks otherwise), on
    ``bind_host``."""
    if not cfg.remote_port:
        gate, weights = free_ports(cfg.bind_host, 2)
        return f"tcp://{cfg.bind_host}:{gate}", f"tcp://{cfg.bind_host}:{weights}"
    ctx = zmq.Context()
    try:
        for port in (cfg.remote_port, cfg.remote_port + 1):
            probe = ctx.socket(zmq.PULL)
            probe.setsockopt(zmq.LINGER, 0)
            try:
                probe.bind(f"tcp://{cfg.bind_host}:{port}")
            except zmq.ZMQError as err:
                raise ConfigError(
                    f"transport.remote_port: tcp://{cfg.bind_host}:{port} cannot be bound ({err}); the gate takes "
                    f"remote_port and the weights the port after it: give two free ports, or 0 for any"
                ) from None
            finally:
                probe.close()
    finally:
        ctx.term()
    return f"tcp://{cfg.bind_host}:{cfg.remote_port}", f"tcp://{cfg.bind_host}:{cfg.remote_port + 1}"


def public_host(cfg: TransportConfig) -> str:
    """The name remote workers reach this host by: ``public_host``, else ``bind_host``, else (bound to every
    interface) this machine's name."""
    import socket as _socket

    if cfg.public_host:
        return cfg.public_host
    if cfg.bind_host in ("0.0.0.0", "::", "*"):
        return _socket.getfqdn()
    return cfg.bind_host


MESSAGE_SLACK_BYTES = 64 * 1024  # a weights message's header on top of the schema's largest payload
# A peer of a bound tcp socket must finish its handshake (CURVE's included) this soon, and one that answers no ping for
# HEARTBEAT_TIMEOUT_MS is dropped: neither an idle connection nor a vanished host holds a file for ever.
HANDSHAKE_MS = 10_000
HEARTBEAT_MS, HEARTBEAT_TIMEOUT_MS = 2_000, 10_000


def socket(
    ctx: zmq.Context,
    kind: int,
    *,
    hwm: int,
    bind: str | None = None,
    connect: str | None = None,
    max_bytes: int = MAX_MESSAGE_BYTES,
) -> zmq.Socket:
    """A socket with LINGER=0, both high-water marks set (in messages) and a bound on a message's bytes
    (``max_bytes`` and a header's slack), bound or connected. A peer that sends a larger message is disconnected by
    zmq before the message is held in memory; the others go on. A bind or connect that fails closes the socket."""
    sock = ctx.socket(kind)
    try:
        _set_up(sock, kind, hwm, bind, connect, max_bytes)
    except BaseException:
        sock.close()
        raise
    return sock


def _set_up(sock: zmq.Socket, kind: int, hwm: int, bind: str | None, connect: str | None, max_bytes: int) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, hwm)
    sock.setsockopt(zmq.RCVHWM, hwm)
    sock.setsockopt(zmq.MAXMSGSIZE, max_bytes + MESSAGE_SLACK_BYTES)
    if kind == zmq.SUB:
        sock.setsockopt(zmq.CONFLATE, 1)  # keep only the newest weights
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    if _curve is not None:
        if bind is not None:
            sock.curve_secretkey, sock.curve_publickey = _curve.server_secret, _curve.server_public
            sock.curve_server = True
        else:
            sock.curve_secretkey, sock.curve_publickey = _curve.client_secret, _curve.client_public
            sock.curve_serverkey = _curve.server_public
    if bind is not None and bind.startswith("tcp://"):
        sock.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_MS)
        sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_MS)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    if bind is not None:
        sock.bind(bind)
    if connect is not None:
        sock.connect(connect)


def recv(sock: zmq.Socket, timeout_ms: int) -> bytes | None:
    """One message, or None when nothing arrived within the timeout (a waiting message costs no poll)."""
    try:
        return sock.recv(zmq.NOBLOCK)
    except zmq.Again:
        pass
    if timeout_ms != 0 and sock.poll(timeout_ms, zmq.POLLIN):
        try:
            return sock.recv(zmq.NOBLOCK)
        except zmq.Again:
            return None
    return None


def send(sock: zmq.Socket, data: bytes, timeout_ms: int) -> bool:
    """Send unless the peer stays full for the whole timeout; False means not sent (backpressure)."""
    try:
        sock.send(data, zmq.NOBLOCK, copy=False)
        return True
    except zmq.Again:
        pass
    if timeout_ms != 0 and sock.poll(timeout_ms, zmq.POLLOUT):
        try:
            sock.send(data, zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False
    return False


def send_nowait(sock: zmq.Socket, data: bytes) -> bool:
    """Send if the socket has room now; stats are dropped rather than ever blocking a hot loop."""
    try:
        sock.send(data, zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False
