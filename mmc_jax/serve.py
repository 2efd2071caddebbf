"""Play any variant against a trained model in the browser: a local web server and one page.

    python -m mmc_jax.serve --model gardner-cpu            # prints http://127.0.0.1:8040/
    python -m mmc_jax.serve --model runs/atomic --runs runs --port 8080

The page (`mmc_jax/data/web/index.html`, plain HTML and JavaScript, no library) draws the 5x5
board itself as SVG, lists the variants and the models (the shipped ones, `--model`, and every
run or exported model found under `--runs`), and lets a person play either colour by clicking a
piece and then its target (a promotion asks for the piece). It shows the model's evaluation and
its top moves with their visit shares, and offers new game, takeback, flip, FEN in (start from
a FEN) and out, and a PGN download with the `[Variant]` tag. The model plays through the same
`evaluation.model_engine.ModelEngine` as the UCI engine (`python -m mmc_jax.engine`), so it is
fair under fog.

The server is the standard library's `http.server` (a `ThreadingHTTPServer`): the page needs a
handful of JSON requests from one person on localhost, which a web framework would only add a
dependency for. It keeps one game per browser tab (the tab holds the game's random id in its
`sessionStorage`), checks every move against the rules, and answers every bad request (unknown
game, illegal move, malformed FEN or JSON, unknown model or variant) with a JSON `{"error": ...}`
and a 4xx status, never a traceback page; the model is only ever loaded from the listed paths,
never from a path a request names. A malformed request body is answered at once (a
`Content-Length` that is not a number of bytes 400, one over `MAX_BODY` 413, a chunked body 411).
A client gets `REQUEST_TIMEOUT` seconds from the start of its request to send all of it (the
request line, headers and body together, however slowly it drips each byte: `DeadlineReader`),
then 408, or, before its request line is in, the connection is closed. At most `MAX_CONCURRENT`
requests are handled at once (`WebServer`); one more is answered at once with 503 and a
`Retry-After` of `BUSY_RETRY_AFTER` seconds, never a reset (connections wait in a listen backlog
of `LISTEN_BACKLOG` until they are accepted). Each error answer, and a client that goes away
before its answer, is one line in the log: one request, whatever it does, holds only its own
thread and never touches another tab's game (docs/errors.md, 'The web server's answers').

Fog (`dark`, every `fog=on` variant): while the game runs, what the server sends holds nothing
the player cannot see: the board is the player's view (`*` on hidden squares, the format of
`rules.fog_fen`), the model's moves are `?` in the move list, and the model's evaluation, its
moves and the PGN are withheld; they are revealed when the game is over.

API (JSON in and out): `GET /api/options`; `POST /api/new {variant, model, colour, fen?,
simulations?}`; `POST /api/move {game, move}` (the model answers in the same request);
`POST /api/takeback {game}`; `GET /api/state?game=ID`; `GET /api/pgn?game=ID` (a file).
A state's `analysis` is the model's last search: the move it played (`played` true), or, in a
new game the human opens, the move it would play (`played` false), so the page shows an
evaluation before the first move; with its value for the side to move, W/D/L, top moves, line.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import errno
import http.server
import io
import json
import os
import re
import secrets
import socket
import sys
import threading
import time
import urllib.parse
from importlib import resources
from typing import Any

from mmc_jax import rules as R
from mmc_jax.evaluation import model_engine, pgn
from mmc_jax.infra import checkpoint, startup
from mmc_jax.training import memory

DEFAULT_PORT = 8040
DEFAULT_SIMULATIONS = 256
SIMULATION_CHOICES = (16, 32, 64, 128, 256, 512, 1024)
MAX_GAMES = 256  # games kept (one per tab); the oldest is dropped beyond
MAX_BODY = 65536
REQUEST_TIMEOUT = 30.0  # seconds a client may take to send a request (line, headers, body)
MAX_CONCURRENT = 16  # requests handled at once; one more is answered 503
BUSY_RETRY_AFTER = 1  # seconds a 503 asks its client to wait before it tries again
LISTEN_BACKLOG = 128  # connections the system holds until the server accepts them
UNIFORM = "uniform-prior"
RESULT_TEXT = {"1-0": "White wins", "0-1": "Black wins", "1/2-1/2": "draw"}


class RequestError(Exception):
    """A bad request: answered with `status`, `headers` and `{"error": message}`."""

    def __init__(self, message: str, status: int = 400, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


class Busy(RequestError):
    """A request beyond the MAX_CONCURRENT handled at once: 503, retry after BUSY_RETRY_AFTER s."""

    def __init__(self):
        super().__init__(
            f"the server is busy: {MAX_CONCURRENT} requests are being handled at once; retry "
            f"in {BUSY_RETRY_AFTER} s",
            503,
            {"Retry-After": str(BUSY_RETRY_AFTER)},
        )


@dataclasses.dataclass
class Game:
    """One game of one tab: the human's colour, the moves so far, the model's last search."""

    id: str
    variant: str
    model: str
    human: int  # 0 White, 1 Black
    start_fen: str
    simulations: int
    moves: list[str] = dataclasses.field(default_factory=list)
    analysis: dict[str, Any] | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)


def find_models(model: str | None, runs: list[str]) -> dict[str, str]:
    """{name: path} of the models the page offers: `model` first, the shipped ones, every run
    or exported model directly under the folders `runs`, and the uniform-prior search."""
    models: dict[str, str] = {}
    if model and model.lower() != "none":
        name = checkpoint.resolve_model_path(model)
        models[model if model in checkpoint.shipped_models() else _short(model)] = name
    for name, path in checkpoint.shipped_models().items():
        models.setdefault(name, path)
    for folder in runs:
        if not os.path.isdir(folder):
            continue
        for child in sorted(os.listdir(folder)):
            path = os.path.join(folder, child)
            if os.path.isdir(os.path.join(path, checkpoint.CHECKPOINT_SUBDIR)) or (
                checkpoint.is_exported(path)
            ):
                models.setdefault(_short(path), path)
    models[UNIFORM] = "none"
    return models


def variant_models_for(model: str | None) -> dict[str, str]:
    """{variant: shipped model} of the variants whose default model (`checkpoint.default_model`)
    is not Gardner's, when no `--model` was given (`model` None); {} when one was (it plays
    every variant)."""
    return {} if model is not None else checkpoint.own_default_models()


def _short(path: str) -> str:
    return os.path.basename(os.path.normpath(path)) or path


class Server:
    """The games and the models behind the page (thread-safe; no HTTP in here)."""

    def __init__(
        self,
        models: dict[str, str],
        default_model: str,
        *,
        simulations: int = DEFAULT_SIMULATIONS,
        worlds: int = model_engine.DEFAULT_WORLDS,
        variant_models: dict[str, str] | None = None,
    ):
        if default_model not in models:
            raise ValueError(f"unknown default model {default_model!r}")
        self.models = models
        self.default_model = default_model
        # {variant: model} where a variant's game starts with another model than the default
        # (`variant_models_for`); the page selects it when that variant is chosen.
        self.variant_models = {
            variant: name for variant, name in (variant_models or {}).items() if name in models
        }
        self.simulations = simulations
        self.worlds = worlds
        self._engines: dict[str, model_engine.ModelEngine] = {}
        self._engine_locks = {name: threading.Lock() for name in models}
        self._games: collections.OrderedDict[str, Game] = collections.OrderedDict()
        self._lock = threading.Lock()

    # -- models

    def engine(self, name: str) -> model_engine.ModelEngine:
        """The model `name` (loaded on first use from its listed path)."""
        if name not in self.models:
            raise RequestError(f"unknown model {name!r}; models: {', '.join(self.models)}")
        with self._engine_locks[name]:
            if name not in self._engines:
                try:
                    loaded = model_engine.load_engine(self.models[name])
                except (FileNotFoundError, ValueError, OSError) as error:
                    raise RequestError(f"model {name!r} cannot be loaded: {error}", 500) from None
                loaded.name = name
                self._engines[name] = loaded
            return self._engines[name]

    def model_for(self, variant: str, request: dict[str, Any]) -> str:
        """The model a new game of `variant` plays: the request's, else the variant's own
        (`variant_models`), else the default."""
        return _text(request, "model", self.variant_models.get(variant, self.default_model))

    def warm_up(self, variant: str = "gardner") -> None:
        """Compile the default model's replay and search (the first game then starts at once)."""
        model = self.engine(self.default_model)
        with self._engine_locks[self.default_model]:
            model.precompile(variant)  # the first move's programs side by side
            model.search(model.position(variant), self.simulations, worlds=self.worlds)

    def options(self) -> dict[str, Any]:
        """What the page offers: variants, models, simulation budgets, the defaults."""
        return {
            "variants": list(R.VARIANTS),
            "models": list(self.models),
            "default_model": self.default_model,
            "variant_models": self.variant_models,
            "simulations": sorted({*SIMULATION_CHOICES, self.simulations}),
            "default_simulations": self.simulations,
        }

    # -- games

    def new_game(self, request: dict[str, Any]) -> dict[str, Any]:
        """Start a game (the model moves first when the human plays Black)."""
        variant = _text(request, "variant", "gardner")
        try:
            variant = model_engine.parse_uci_variant(variant)
        except ValueError as error:
            raise RequestError(str(error)) from None
        model = self.model_for(variant, request)
        self.engine(model)  # unknown or broken models fail here
        colour = _text(request, "colour", "white").lower()
        if colour not in ("white", "black"):
            raise RequestError(f"colour must be white or black, got {colour!r}")
        fen = _text(request, "fen", "").strip() or R.start_fen(variant)
        simulations = request.get("simulations", self.simulations)
        allowed = sorted({*SIMULATION_CHOICES, self.simulations})
        if isinstance(simulations, bool) or simulations not in allowed:
            raise RequestError(f"simulations must be one of {allowed}, got {simulations!r}")
        try:  # one line before anything compiles (issue 52)
            self.engine(model).check_size(R.has_fog(variant), int(simulations), self.worlds)
        except ValueError as error:
            raise RequestError(f"simulations {simulations}: {error}") from None
        game = Game(
            id=secrets.token_urlsafe(12),
            variant=variant,
            model=model,
            human=0 if colour == "white" else 1,
            start_fen=fen,
            simulations=int(simulations),
        )
        with game.lock:
            position = self._position(game)  # a bad FEN fails before the game is kept
            with self._lock:
                self._games[game.id] = game
                while len(self._games) > MAX_GAMES:
                    self._games.popitem(last=False)
            if position.turn == game.human and not position.over and not position.fog:
                # Before the human's first move: the model's view of the position, so the page
                # shows an evaluation from the start (its move stays unplayed).
                game.analysis = self._analysis(game, position, played=False)
            position = self._model_moves(game, position)
            return self._state(game, position)

    def game(self, game_id: Any) -> Game:
        """The game of a tab; RequestError 404 when it is unknown (or was dropped)."""
        with self._lock:
            game = self._games.get(str(game_id))
            if game is None:
                raise RequestError(f"no game {game_id!r} (start a new game)", 404)
            self._games.move_to_end(game.id)
            return game

    def state(self, game_id: Any) -> dict[str, Any]:
        game = self.game(game_id)
        with game.lock:
            return self._state(game, self._position(game))

    def move(self, game_id: Any, move: Any) -> dict[str, Any]:
        """The human's move (checked against the rules), then the model's answer."""
        game = self.game(game_id)
        move = str(move or "").strip().lower()
        with game.lock:
            position = self._position(game)
            if position.over:
                raise RequestError(f"the game is over ({position.result})")
            if position.turn != game.human:
                raise RequestError("it is not your move")
            if move not in position.legal:
                listed = " ".join(position.legal)
                raise RequestError(f"illegal move {move!r}; legal moves: {listed}")
            game.moves.append(move)
            game.analysis = None
            position = self._model_moves(game, self._position(game))
            return self._state(game, position)

    def takeback(self, game_id: Any) -> dict[str, Any]:
        """Undo back to the human's previous turn (its last move and the model's answer)."""
        game = self.game(game_id)
        with game.lock:
            # Plies before the human's last move: the moves from the human's own turns.
            first_human = 0 if _turn_of(game.start_fen) == game.human else 1
            human_plies = [i for i in range(first_human, len(game.moves), 2)]
            if not human_plies:
                raise RequestError("there is no move of yours to take back")
            del game.moves[human_plies[-1] :]
            game.analysis = None
            return self._state(game, self._position(game))

    def pgn(self, game_id: Any) -> tuple[str, str]:
        """(file name, PGN text) of a game; under fog only once it is over."""
        game = self.game(game_id)
        with game.lock:
            position = self._position(game)
            if position.fog and not position.over:
                raise RequestError("under fog the record is available when the game is over", 409)
            names = ["you", game.model] if game.human == 0 else [game.model, "you"]
            record = {
                "variant": game.variant,
                "white": names[0],
                "black": names[1],
                "start_fen": game.start_fen,
                "moves": game.moves,
                "result": position.result or "*",
                "termination": "normal" if position.over else "unterminated",
            }
            text = pgn.format_game(record, event="mmc_jax serve")
        return f"mmc_jax-{game.variant.replace(',', '_').replace('=', '-')}.pgn", text

    # -- internals

    def _position(self, game: Game) -> model_engine.GamePosition:
        model = self.engine(game.model)
        try:
            with self._engine_locks[game.model]:
                return model.position(game.variant, game.start_fen, game.moves)
        except ValueError as error:
            raise RequestError(str(error)) from None

    def _model_moves(
        self, game: Game, position: model_engine.GamePosition
    ) -> model_engine.GamePosition:
        if position.over or position.turn == game.human:
            return position
        game.analysis = self._analysis(game, position, played=True)
        game.moves.append(game.analysis["move"])
        return self._position(game)

    def _analysis(
        self, game: Game, position: model_engine.GamePosition, played: bool
    ) -> dict[str, Any]:
        """The model's search of `position`: the move it plays (`played`) or would play, its
        value for the side to move, the W/D/L, its top moves, line, nodes and seconds."""
        model = self.engine(game.model)
        with self._engine_locks[game.model]:
            result = model.search(position, game.simulations, worlds=self.worlds)
        return {
            "move": result.move,
            "played": played,
            "value": round(result.value, 4),
            "score_cp": result.score_cp,
            "wdl": list(result.wdl),
            "top": [[m, round(p, 4)] for m, p in list(result.policy.items())[:5]],
            "pv": list(result.pv),
            "nodes": result.nodes,
            "seconds": round(result.seconds, 3),
        }

    def _state(self, game: Game, position: model_engine.GamePosition) -> dict[str, Any]:
        """What the page gets. Under fog, while the game runs: the human's view only."""
        hidden = position.fog and not position.over
        if hidden:
            fen = position.view if position.turn == game.human else None
            first = _turn_of(game.start_fen)
            moves = [m if (first + i) % 2 == game.human else "?" for i, m in enumerate(game.moves)]
            last = None
        else:
            fen, moves = position.fen, list(game.moves)
            last = game.moves[-1] if game.moves else None
        my_turn = not position.over and position.turn == game.human
        result = position.result
        return {
            "game": game.id,
            "variant": game.variant,
            "model": game.model,
            "human": "white" if game.human == 0 else "black",
            "turn": "white" if position.turn == 0 else "black",
            "fog": position.fog,
            "fen": fen,
            "start_fen": game.start_fen,
            "moves": moves,
            "last_move": last,
            "legal": list(position.legal) if my_turn else [],
            "over": position.over,
            "result": result,
            "result_text": f"{result} ({RESULT_TEXT[result]})" if result else None,
            "analysis": None if hidden else game.analysis,
            "simulations": game.simulations,
        }


def _text(request: dict[str, Any], key: str, default: str) -> str:
    value = request.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise RequestError(f"{key} must be a string, got {type(value).__name__}")
    return value


def _turn_of(fen: str) -> int:
    fields = fen.split()
    return 1 if len(fields) > 1 and fields[1] == "b" else 0


# ---------------------------------------------------------------------------------------------
# HTTP


def page() -> bytes:
    """The page (mmc_jax/data/web/index.html)."""
    return resources.files("mmc_jax").joinpath("data", "web", "index.html").read_bytes()


class DeadlineReader(io.RawIOBase):
    """A connection's receiving side whose reads end at the request's deadline: each waits at
    most until then (the socket's timeout alone is per read: a client sending a byte now and
    then held its thread as long as it liked), and one after it is a `TimeoutError`."""

    def __init__(self, sock: socket.socket, seconds: float):
        super().__init__()
        self.sock = sock
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def restart(self) -> None:
        """A new request: it has `seconds` from now."""
        self.deadline = time.monotonic() + self.seconds

    def readinto(self, buffer) -> int:
        """What the socket has (waiting at most until the deadline) into `buffer`."""
        left = self.deadline - time.monotonic()
        if left > 0:
            self.sock.settimeout(left)
            try:
                return self.sock.recv_into(buffer)
            except TimeoutError:
                pass  # the deadline came while it waited
        raise TimeoutError(f"the request did not arrive within {self.seconds:g} s")


class Handler(http.server.BaseHTTPRequestHandler):
    """JSON API and the page; every error is a JSON answer (see the module docstring)."""

    server_version = "mmc_jax"
    app: Server  # set on the subclass made by `make_server`
    server: WebServer
    quiet = False
    # The seconds a request may take to arrive, all of it (`DeadlineReader`); a client that
    # stalls holds its own thread, and only this long. Also the socket's timeout for the answer.
    timeout = REQUEST_TIMEOUT
    error = ""  # the error of the answer being sent (its log line ends with it)

    def setup(self) -> None:
        """The base's streams, the receiving one read against the request's deadline."""
        super().setup()
        self.rfile.close()
        self.reader = DeadlineReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        """The base's request (a request line that misses the deadline closes the connection,
        one log line), its deadline `timeout` from now."""
        self.reader.restart()
        self.error = ""
        super().handle_one_request()

    def parse_request(self) -> bool:
        """The base's parsing of the request line and headers; headers that miss the deadline
        are a 408."""
        try:
            return super().parse_request()
        except TimeoutError:
            self.close_connection = True
            self._error(
                f"the request's headers did not arrive in time: not sent within {self.timeout:g} s",
                408,
            )
            return False

    def send_response(self, code, message=None) -> None:
        """The base's; the request is in, so the answer's writes get the whole `timeout`."""
        self.connection.settimeout(self.timeout)
        super().send_response(code, message)

    def handle(self) -> None:
        """The base class's loop; a client that goes away (or stops reading) is one log line,
        never a 500 or a traceback."""
        try:
            super().handle()
        except (ConnectionError, TimeoutError) as error:
            self.close_connection = True
            self.log_message("client went away: %s: %s", type(error).__name__, error)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 -- the base's name
        if not self.quiet:
            sys.stderr.write(f"{self.address_string()} {format % args}\n")

    def log_request(self, code="-", size="-") -> None:
        """The base's line of an answer; an error answer's line ends with its error."""
        code = code.value if isinstance(code, http.HTTPStatus) else code
        line = f'"{self.requestline}" {code} {size}'
        self.log_message("%s", f"{line} {self.error}" if self.error else line)

    def send_error(self, code, message=None, explain=None):
        """Malformed requests (the base class's HTML error pages): JSON instead."""
        self._error(message or "bad request", code)

    def _error(self, message: str, status: int, headers: dict[str, str] | None = None) -> None:
        """The answer `{"error": message}` with `status` and `headers`; logged with it."""
        self.error = message
        self._json({"error": message}, status, headers)

    def _json(self, payload: Any, status: int = 200, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any]:
        """The JSON object of the request's body (none: `{}`); RequestError for a body that is
        malformed, too large, chunked, shorter than announced or not sent in time."""
        self.close_connection = True  # what is left of a refused body is never read as a request
        if self.headers.get("Transfer-Encoding"):
            raise RequestError(
                "a chunked request body is not supported; send the body with a Content-Length", 411
            )
        lengths = [value.strip() for value in self.headers.get_all("Content-Length") or []]
        if len(set(lengths)) > 1:
            raise RequestError(f"conflicting Content-Length headers: {', '.join(lengths)}")
        text = lengths[0] if lengths else "0"
        if not re.fullmatch(r"[0-9]+", text):
            raise RequestError(
                f"bad Content-Length {text!r}: the body's length in bytes is expected"
            )
        length = int(text)
        if length > MAX_BODY:
            raise RequestError(f"request too large: {length} bytes, at most {MAX_BODY}", 413)
        try:
            raw = self.rfile.read(length) if length else b"{}"
        except TimeoutError:  # the request's deadline (`DeadlineReader`)
            raise RequestError(
                f"the request body did not arrive in time: {length} bytes announced, not sent "
                f"within {self.timeout:g} s",
                408,
            ) from None
        if len(raw) < length:
            raise RequestError(f"the request body ended after {len(raw)} of {length} bytes")
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError):
            raise RequestError("the request body is not JSON") from None
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return body

    def _handle(self, method: str) -> None:
        """The request's answer: read all of it, then, in one of the server's places for a
        request (none free: 503), what it asks for; every error a JSON answer."""
        try:
            body = self._body() if method == "POST" else {}
            with self.server.place():
                self._route(method, body)
        except RequestError as error:
            self._error(str(error), error.status, error.headers)
        except (ConnectionError, TimeoutError):
            raise  # the client went away: `handle` logs it (answering would fail again)
        except Exception as error:  # noqa: BLE001 -- a bug is a JSON 500, never a traceback page
            self._error(f"internal error: {type(error).__name__}: {error}", 500)

    def _route(self, method: str, request: dict[str, Any]) -> None:
        """What the request (its JSON body `request`) asks for: the page, or the API's answer."""
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        if method == "GET" and url.path in ("/", "/index.html"):
            body = page()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if method == "GET" and url.path == "/api/options":
            return self._json(self.app.options())
        if method == "GET" and url.path == "/api/state":
            return self._json(self.app.state(query.get("game")))
        if method == "GET" and url.path == "/api/pgn":
            name, text = self.app.pgn(query.get("game"))
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-chess-pgn; charset=utf-8")
            self.send_header("Content-Disposition", f'attachment; filename="{name}"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if method == "POST" and url.path == "/api/new":
            return self._json(self.app.new_game(request))
        if method == "POST" and url.path == "/api/move":
            return self._json(self.app.move(request.get("game"), request.get("move")))
        if method == "POST" and url.path == "/api/takeback":
            return self._json(self.app.takeback(request.get("game")))
        raise RequestError(f"no such page: {method} {url.path}", 404)

    def do_GET(self) -> None:  # noqa: N802 -- http.server's names
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")


class WebServer(http.server.ThreadingHTTPServer):
    """The page's `ThreadingHTTPServer`: a thread per connection, a listen backlog of
    LISTEN_BACKLOG (the default 5 refused a burst of new games) and MAX_CONCURRENT places for
    requests being handled."""

    request_queue_size = LISTEN_BACKLOG
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[Handler]):
        super().__init__(address, handler)
        self.slots = threading.BoundedSemaphore(MAX_CONCURRENT)

    @contextlib.contextmanager
    def place(self):
        """One of the MAX_CONCURRENT places for a request, for the `with` block; `Busy` (503)
        at once when none is free."""
        if not self.slots.acquire(blocking=False):
            raise Busy()
        try:
            yield
        finally:
            self.slots.release()


def make_server(
    app: Server,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    quiet=False,
    timeout: float = REQUEST_TIMEOUT,
) -> WebServer:
    """A `WebServer` serving `app` (port 0: any free port; `server_address` says); `timeout`:
    the seconds a client may take to send its request, all of it."""
    handler = type("BoundHandler", (Handler,), {"app": app, "quiet": quiet, "timeout": timeout})
    return WebServer((host, port), handler)


def port_arg(text: str) -> int:
    """argparse type: a TCP port, 0 to 65535 (0: any free one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--port must be an integer, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port must be 0 to 65535 (0: any free one), got {port}")
    return port


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mmc_jax.serve",
        description="Play any variant against a trained model in the browser (a local web "
        "server; open the address it prints).",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="the model selected first, for every variant: a shipped model's name, an exported "
        "model, a run workdir or a checkpoint; 'none': the uniform-prior search (default: each "
        "variant's shipped model where it has one, "
        f"{', '.join(f'{v}: {m}' for v, m in variant_models_for(None).items())}; else "
        f"{checkpoint.default_model('gardner') or 'none'})",
    )
    parser.add_argument(
        "--runs", nargs="*", default=[], help="folders whose runs and exported models to list"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=port_arg, default=DEFAULT_PORT, help="0: any free port")
    parser.add_argument(
        "--simulations",
        type=int,
        default=DEFAULT_SIMULATIONS,
        help=f"the model's network evaluations per move (default {DEFAULT_SIMULATIONS})",
    )
    parser.add_argument("--no-warm-up", action="store_true", help="compile on the first game")
    parser.add_argument("--quiet", action="store_true", help="no request log on stderr")
    return parser


def main(argv: list[str] | None = None) -> int:
    """`python -m mmc_jax.serve`: serve until Ctrl-C; returns the exit status (1 with one line
    on stderr when the model cannot be loaded or the port is taken)."""
    args = _parser().parse_args(argv)
    startup.start()
    if args.simulations < 1:
        print("error: --simulations must be positive", file=sys.stderr)
        return 2
    try:  # one line before anything compiles (issue 52)
        memory.check_search(args.simulations, name="--simulations")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    variant_models = variant_models_for(args.model)
    if args.model is None:
        args.model = checkpoint.default_model("gardner") or "none"
    models = find_models(args.model, args.runs)
    default = UNIFORM if args.model.lower() == "none" else next(iter(models))
    app = Server(models, default, simulations=args.simulations, variant_models=variant_models)
    try:
        app.engine(default)
    except RequestError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    try:
        httpd = make_server(app, args.host, args.port, quiet=args.quiet)
    except OSError as error:
        hint = ""
        if error.errno == errno.EADDRINUSE:
            hint = "; pass another --port, or --port 0 for any free one"
        print(f"error: cannot listen on {args.host}:{args.port}: {error}{hint}", file=sys.stderr)
        return 1
    host, port = httpd.server_address[:2]
    print(f"mmc_jax: play {default} at http://{host}:{port}/  (Ctrl-C to stop)", flush=True)
    if not args.no_warm_up:
        threading.Thread(target=warm_up_and_say, args=(app,), daemon=True).start()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


def warm_up_and_say(app: Server) -> None:
    """`app.warm_up()`, said before and after on stdout (the server's first game waits for it:
    whoever watches the terminal knows why); a failure is a warning, the page still works."""
    print(
        f"warming up: compiling {app.default_model}'s search (about 15 s on a 2-core CPU the "
        "first time, seconds from the compile cache) ...",
        flush=True,
    )
    started = time.monotonic()
    try:
        app.warm_up()
    except Exception as error:  # noqa: BLE001 -- the page still works, it compiles later
        print(f"warning: warm-up failed: {error}", file=sys.stderr)
        return
    print(f"warmed up in {time.monotonic() - started:.1f} s: games start at once", flush=True)


if __name__ == "__main__":
    sys.exit(main())
