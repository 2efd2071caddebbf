"""Tests for mmc_jax.serve: the web server's API (legality, one game per tab, clear errors,
nothing hidden under fog) and the page in a real browser.

The browser test drives Debian's headless Chromium through its chromedriver (tests/webdriver.py,
standard library only): it opens the page, plays by clicking, checks the board and the model's
reply against Fairy-Stockfish's rules (pyffish), checks that an illegal click is refused, that a
fog game's page holds no hidden piece, and reads its own screenshot (a board, not a blank
window). It skips, naming the packages, where chromium and chromium-driver are not installed;
.ci/run installs them. The server runs in this process with the shipped 2x32 model at 16
simulations (2 worlds under fog), as tests/commands/test_uci_serve.py searches.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import json
import re
import select
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pyffish as sf
import pytest
import webdriver

from mmc_jax import rules as R
from mmc_jax import serve, uci
from mmc_jax.evaluation import pgn

START = R.START_FENS["gardner"]


@pytest.fixture(scope="module")
def ffish():
    sf.load_variant_config(open(uci.variants_file()).read())
    return sf


@pytest.fixture(scope="module")
def site():
    """(base URL, the `serve.Server`) of a server on a free port, for the whole module."""
    models = serve.find_models("gardner-cpu", [])
    app = serve.Server(
        models,
        "gardner-cpu",
        simulations=16,
        worlds=2,
        variant_models=serve.variant_models_for(None),
    )
    httpd = serve.make_server(app, "127.0.0.1", 0, quiet=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    host, port = httpd.server_address[:2]
    yield f"http://{host}:{port}", app
    httpd.shutdown()
    httpd.server_close()


def call(base: str, path: str, body=None, raw: bytes | None = None):
    """(status, decoded JSON or text) of a request; never raises for an HTTP error status."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(base + path, data=data, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            status, text, kind = response.status, response.read(), response.headers
    except urllib.error.HTTPError as error:
        status, text, kind = error.code, error.read(), error.headers
    if "json" in kind.get("Content-Type", ""):
        return status, json.loads(text)
    return status, text.decode()


def true_fen(app: serve.Server, state) -> str:
    """The referee's position of a game (read from the server's own record of it)."""
    game = app.game(state["game"])
    return app.engine(game.model).position(game.variant, game.start_fen, game.moves).fen


def test_a_new_game_as_white_shows_the_models_evaluation_before_the_first_move(site, ffish):
    base, _ = site
    status, state = call(base, "/api/new", {"variant": "gardner", "colour": "white"})
    assert status == 200 and state["moves"] == [] and state["turn"] == "white"
    analysis = state["analysis"]
    assert analysis["played"] is False and analysis["top"] and -1 <= analysis["value"] <= 1
    assert analysis["move"] in ffish.legal_moves("gardner", START, [])  # proposed, not played
    status, state = call(base, "/api/move", {"game": state["game"], "move": "e2e3"})
    assert state["analysis"]["played"] is True and state["analysis"]["move"] == state["moves"][1]


def test_a_game_through_the_api(site, ffish):
    base, app = site
    status, options = call(base, "/api/options")
    assert status == 200 and "dark" in options["variants"] and "gardner-cpu" in options["models"]
    status, state = call(base, "/api/new", {"variant": "gardner", "colour": "black"})
    assert status == 200 and state["human"] == "black" and state["turn"] == "black"
    (first,) = state["moves"]  # the model opened
    assert first in ffish.legal_moves("gardner", START, [])
    assert state["analysis"]["move"] == first and state["analysis"]["top"]
    assert sorted(state["legal"]) == sorted(ffish.legal_moves("gardner", START, [first]))
    reply = state["legal"][0]
    status, state = call(base, "/api/move", {"game": state["game"], "move": reply})
    assert status == 200 and state["moves"][:2] == [first, reply] and len(state["moves"]) == 3
    assert state["fen"] == ffish.get_fen("gardner", START, state["moves"])
    status, text = call(base, f"/api/pgn?game={state['game']}")
    (game,) = pgn.read_pgn(io.StringIO(text))
    assert status == 200 and game.headers["Variant"] == "gardner" and game.moves == state["moves"]
    status, back = call(base, "/api/takeback", {"game": state["game"]})
    assert status == 200 and back["moves"] == [first] and back["turn"] == "black"


@pytest.mark.parametrize(
    "path, body, raw, status, message",
    [
        ("/api/move", {"game": "nope", "move": "a2a3"}, None, 404, "no game 'nope'"),
        ("/api/state?game=nope", None, None, 404, "no game"),
        ("/api/new", None, b"{not json", 400, "not JSON"),
        ("/api/new", None, b"[1, 2]", 400, "must be a JSON object"),
        ("/api/new", {"variant": "chess"}, None, 400, "valid variants"),
        ("/api/new", {"model": "/etc"}, None, 400, "unknown model '/etc'"),
        ("/api/new", {"fen": "5/5/5/5/5 w - - 0 1"}, None, 400, "king"),
        ("/api/new", {"colour": "red"}, None, 400, "colour must be white or black"),
        ("/api/new", {"simulations": 7}, None, 400, "simulations must be one of"),
        ("/no/such/page", None, None, 404, "no such page"),
    ],
)
def test_bad_requests_get_a_clear_json_error(site, path, body, raw, status, message):
    base, _ = site
    got, answer = call(base, path, body, raw)
    assert got == status and message in answer["error"], answer
    assert "Traceback" not in json.dumps(answer)


def test_illegal_moves_are_refused_and_tabs_keep_their_games(site, ffish):
    base, _ = site
    _, one = call(base, "/api/new", {"variant": "gardner"})
    _, two = call(base, "/api/new", {"variant": "baby"})
    status, answer = call(base, "/api/move", {"game": one["game"], "move": "a2a4"})
    assert status == 400 and "illegal move 'a2a4'" in answer["error"] and "a2a3" in answer["error"]
    status, answer = call(base, "/api/move", {"game": one["game"], "move": "zz"})
    assert status == 400 and "illegal move" in answer["error"]
    _, after = call(base, "/api/move", {"game": two["game"], "move": "b1c3"})
    _, again = call(base, f"/api/state?game={one['game']}")
    assert again["moves"] == [] and again["variant"] == "gardner"
    assert after["variant"] == "baby" and after["moves"][0] == "b1c3"


def all_keys(value) -> set[str]:
    """Every key of every dict nested in `value` (an answer's JSON)."""
    if isinstance(value, dict):
        return set(value).union(*(all_keys(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(all_keys(v) for v in value))
    return set()


@pytest.mark.slow  # the fast tier's fairness check: tests/evaluation/test_fair_search.py
def test_fog_game_sends_only_the_players_view(site, ffish):
    """Under fog every answer holds the player's view: its squares are those of pyffish's fog
    FEN of the true position; the model's moves, its evaluation and the record are withheld."""
    base, app = site
    _, state = call(base, "/api/new", {"variant": "dark", "colour": "black"})
    for _ in range(3):
        fen = true_fen(app, state)
        assert state["fen"] == ffish.get_fog_fen(fen, "dark-gardner")
        assert state["analysis"] is None and state["last_move"] is None
        hidden = [m for i, m in enumerate(state["moves"]) if i % 2 == 0]
        assert hidden and set(hidden) == {"?"}
        assert not {"top", "pv"} & all_keys(state)  # (a random game id may spell "pv")
        status, answer = call(base, f"/api/pgn?game={state['game']}")
        assert status == 409 and "when the game is over" in answer["error"]
        if state["over"]:
            break
        _, state = call(base, "/api/move", {"game": state["game"], "move": state["legal"][0]})
    if not state["over"]:
        return
    assert state["fen"] == true_fen(app, state)  # revealed at the end


# ---------------------------------------------------------------------------------------------
# The page in a browser


needs_browser = pytest.mark.skipif(
    webdriver.skip_reason() is not None, reason=str(webdriver.skip_reason())
)


def pieces(browser) -> dict[str, str]:
    """{square: letter} of the pieces the page draws."""
    return browser.run(
        "const out = {}; for (const p of document.querySelectorAll('#board text.piece'))"
        " out[p.dataset.square] = p.dataset.piece; return out;"
    )


def board_of(fen: str) -> dict[str, str]:
    out = {}
    for i, row in enumerate(fen.split()[0].split("/")):
        file = 0
        for ch in row:
            if ch.isdigit():
                file += int(ch)
            else:
                if ch != "*":
                    out[f"{'abcde'[file]}{5 - i}"] = ch
                file += 1
    return out


def wait_for_moves(browser, count: int) -> None:
    browser.wait(
        "const b = document.getElementById('board');"
        f"return b.dataset.moves === '{count}' && "
        "document.getElementById('status').textContent.startsWith('Your move');"
    )


@needs_browser
def test_the_page_in_headless_chromium(site, ffish, tmp_path):
    base, app = site
    with webdriver.Browser() as browser:
        browser.get(base + "/")
        wait_for_moves(browser, 0)  # the page starts a game: White, the shipped model
        assert pieces(browser) == board_of(START)
        # An evaluation before the first move (issue 51): the model's view, its move unplayed.
        assert "Before your move, the model's view of the position" in browser.text("#analysis")

        # A legal move by clicking: the pawn, then its target; the model replies.
        browser.click("#sq-e2")
        targets = browser.run("return document.querySelectorAll('#board circle.target').length")
        assert targets == 1  # e2e3 only (no double step)
        browser.click("#sq-e3")
        wait_for_moves(browser, 2)
        moves = browser.text("#moves").split()
        assert moves[:2] == ["1.", "e2e3"] and moves[2] in ffish.legal_moves(
            "gardner", START, ["e2e3"]
        )
        fen = ffish.get_fen("gardner", START, ["e2e3", moves[2]])
        assert pieces(browser) == board_of(fen)
        assert browser.run("return document.getElementById('fen-out').value") == fen
        assert "Model played " + moves[2] in browser.text("#analysis")
        # The value as the expected score, the W/D/L named as what it is (no draw head).
        assert "expected score " in browser.text("#analysis")
        assert "as W/D/L with the most draws" in browser.text("#analysis")
        assert browser.run("return document.querySelectorAll('#top-moves .top-move').length") >= 1

        # An illegal click (the rook through its own pawn) is refused; the board stays.
        browser.click("#sq-a1")
        browser.click("#sq-a3")
        browser.wait("return document.getElementById('message').textContent")
        assert "illegal move 'a1a3'" in browser.text("#message")
        assert pieces(browser) == board_of(fen)

        # Its screenshot shows a board: both square colours and pieces of both colours.
        png = browser.screenshot()
        (tmp_path / "page.png").write_bytes(png)
        box = browser.run(
            "const r = document.getElementById('board').getBoundingClientRect();"
            "return [r.left, r.top, r.width, r.height];"
        )
        check_board_picture(png, box)

        # Flip turns the board (a1 at the top right), takeback undoes the pair of moves.
        browser.click("#flip")
        top = browser.run(
            "const r = document.getElementById('sq-a1').getBoundingClientRect(); return r.top;"
        )
        assert top < browser.run(
            "return document.getElementById('sq-a5').getBoundingClientRect().top;"
        )
        browser.click("#takeback")
        wait_for_moves(browser, 0)
        assert pieces(browser) == board_of(START)

        # Choosing atomic selects its own shipped model; another variant the default again.
        choose = "const v = document.getElementById('variant'); v.value = arguments[0];"
        choose += "v.dispatchEvent(new Event('change'));"
        model = "return document.getElementById('model').value"
        browser.run(choose, "atomic")
        assert browser.run(model) == "atomic-supervised"

        # A fog game: the page never holds a hidden piece.
        browser.run(choose, "dark")
        assert browser.run(model) == "gardner-cpu"
        browser.click("#new-game")
        wait_for_moves(browser, 0)
        browser.click("#sq-c2")
        browser.click("#sq-c3")
        wait_for_moves(browser, 2)
        game_id = browser.run("return sessionStorage.getItem('mmc_game');")
        game = app.game(game_id)
        truth = app.engine(game.model).position(game.variant, game.start_fen, game.moves).fen
        view = ffish.get_fog_fen(truth, "dark-gardner")
        hidden = {sq: p for sq, p in board_of(truth).items() if sq not in board_of(view)}
        assert hidden  # Black's back rank at least
        drawn = pieces(browser)
        assert drawn == board_of(view)
        source = browser.source()
        for square in hidden:
            assert f'data-piece="{hidden[square]}" data-square="{square}"' not in source
            assert f'data-square="{square}" data-piece' not in source
        assert truth.split()[0] not in source
        assert browser.run("return document.querySelectorAll('#board .hidden').length") == len(
            [c for c in view.split()[0] if c == "*"]
        )
        assert "?" in browser.text("#moves")


def check_board_picture(png: bytes, box) -> None:
    """The board area of a screenshot holds the light and dark squares and dark and light
    piece pixels (a blank or unstyled page fails)."""
    import matplotlib.image

    image = matplotlib.image.imread(io.BytesIO(png))[..., :3]  # floats in [0, 1]
    left, top, width, height = (int(round(v)) for v in box)
    board = image[top : top + height, left : left + width]
    assert board.shape[0] > 300 and board.shape[1] > 300

    def share(rgb, tolerance=0.06):
        return float(np.mean(np.all(np.abs(board - np.array(rgb) / 255) < tolerance, axis=-1)))

    assert share((240, 217, 181)) > 0.15  # light squares
    assert share((181, 136, 99)) > 0.15  # dark squares
    assert share((17, 17, 17), 0.1) > 0.01  # black pieces
    assert share((255, 255, 255), 0.03) > 0.005  # white pieces


def test_start_up_failures_are_one_line(site, capsys):
    base, _ = site
    port = int(base.rsplit(":", 1)[1])  # taken by the module's server
    assert serve.main(["--port", str(port), "--no-warm-up", "--quiet"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot listen on 127.0.0.1:{port}")
    assert serve.main(["--model", "/nonexistent/model", "--port", "0", "--no-warm-up"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be loaded" in err[0]


# ---------------------------------------------------------------------------------------------
# Malformed requests, stalled and vanishing clients: a clear 4xx at once, one log line, and the
# other tabs served meanwhile. A server with only the uniform-prior model: nothing compiles.

ERRORS_DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


@pytest.fixture(scope="module")
def bare_site():
    """(port, `serve.Server`, the HTTP server) of a server on a free port that logs requests."""
    app = serve.Server({serve.UNIFORM: "none"}, serve.UNIFORM)
    httpd = serve.make_server(app, "127.0.0.1", 0)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1], app, httpd
    httpd.shutdown()
    httpd.server_close()


def raw_request(port: int, head: list[str], body: bytes = b"", then: str = "wait"):
    """(status, JSON answer) of a request sent as bytes: the request line and headers `head`,
    then `body` (`drip`: one byte every 0.4 s), then either waits for the answer or first closes
    the sending side."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        lines = [f"{head[0]} HTTP/1.1", "Host: 127.0.0.1", *head[1:]]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        drip(sock, body) if then == "drip" else sock.sendall(body)
        if then == "close":
            sock.shutdown(socket.SHUT_WR)
        answer = read_answer(sock)
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


def drip(sock: socket.socket, data: bytes, gap: float = 0.4) -> None:
    """Sends `data` one byte every `gap` seconds (each well within the server's timeout per
    read), until all is sent or the server answers or closes."""
    for byte in data:
        if select.select([sock], [], [], gap)[0]:
            return  # an answer, or the end
        try:
            sock.sendall(bytes([byte]))
        except OSError:  # the server closed (its answer, if any, is still to be read)
            return


def read_answer(sock: socket.socket) -> bytes:
    """What the server sends until it closes (a reset after its answer ends it too)."""
    answer = b""
    try:
        while chunk := sock.recv(65536):  # the server closes after its answer
            answer += chunk
    except ConnectionResetError:
        pass
    return answer


def server_answer_table() -> list[tuple[str, list[str], bytes, str, int, str]]:
    """(input, head lines, body, then, status, error) of every row of docs/errors.md's table of
    the web server's answers."""
    section = ERRORS_DOC.read_text(encoding="utf-8").split("## The web server's answers", 1)[1]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| Input "):
            continue
        what, request, body, then, status, error = (c.strip() for c in line.strip("|").split(" | "))
        head = re.findall(r"`([^`]*)`", request)
        body = b"" if body == "none" else codecs.decode(body.strip("`"), "unicode_escape").encode()
        rows.append((what, head, body, then, int(status), error.strip("`")))
    return rows


@pytest.mark.parametrize(
    "what, head, body, then, status, error",
    server_answer_table(),
    ids=[row[0] for row in server_answer_table()],
)
def test_the_server_answer_table_is_true(
    bare_site, monkeypatch, what, head, body, then, status, error
):
    """Each malformed request of docs/errors.md gets its 4xx and its error at once (a negative
    Content-Length hung, a chunked body started a default game); a body that stops short, or
    comes a byte at a time, gets 408 when the request timeout ends (here 0.5 s); a request while
    every place is taken gets 503."""
    port, _, httpd = bare_site
    monkeypatch.setattr(httpd.RequestHandlerClass, "timeout", 0.5 if status == 408 else 30.0)
    for _ in range(serve.MAX_CONCURRENT if then == "busy" else 0):
        assert httpd.slots.acquire(blocking=False)  # as if that many requests were in progress
    started = time.monotonic()
    try:
        got, answer = raw_request(port, head, body, "wait" if then == "busy" else then)
    finally:
        for _ in range(serve.MAX_CONCURRENT if then == "busy" else 0):
            httpd.slots.release()
    assert (got, set(answer)) == (status, {"error"}), answer
    assert re.fullmatch(re.escape(error).replace("…", ".*"), answer["error"]), answer["error"]
    assert time.monotonic() - started < 5


def test_a_stalled_client_does_not_hold_up_other_tabs(bare_site, monkeypatch):
    """A client that announces a body and stops sending holds only its own thread: other
    requests are answered meanwhile, and it gets 408 when the request timeout ends."""
    port, _, httpd = bare_site
    monkeypatch.setattr(httpd.RequestHandlerClass, "timeout", 2.0)
    stalled: dict[str, object] = {}

    def stall():
        head = ["POST /api/move", "Content-Length: 100"]
        stalled["answer"] = raw_request(port, head, b'{"game"')

    thread = threading.Thread(target=stall)
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    base = f"http://127.0.0.1:{port}"
    assert call(base, "/api/options")[0] == 200
    assert call(base, "/api/state?game=nope")[0] == 404
    assert time.monotonic() - started < 1.0 and thread.is_alive()  # answered while it stalls
    thread.join(timeout=10)
    status, answer = stalled["answer"]
    assert status == 408 and "did not arrive in time" in answer["error"], answer
    assert call(base, "/api/options")[0] == 200


def test_a_client_that_goes_away_is_one_log_line(bare_site, monkeypatch, capsys):
    """A tab closed before its answer was logged as a 500 with two BrokenPipeError tracebacks:
    it is one line, and the server goes on."""
    port, app, _ = bare_site
    gone = threading.Event()
    options = app.options

    def options_after_the_client_left():
        gone.wait(10)
        return options()

    monkeypatch.setattr(app, "options", options_after_the_client_left)
    capsys.readouterr()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /api/options HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    time.sleep(0.2)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # a reset, as a closed tab's
    time.sleep(0.2)
    gone.set()
    err = ""
    deadline = time.monotonic() + 10
    while "went away" not in err and time.monotonic() < deadline:
        time.sleep(0.05)
        err += capsys.readouterr().err
    monkeypatch.setattr(app, "options", options)
    assert "Traceback" not in err and " 500 " not in err, err
    (line,) = [line for line in err.splitlines() if "went away" in line]
    assert re.fullmatch(
        r"127\.0\.0\.1 client went away: (BrokenPipe|ConnectionReset)Error: .*", line
    )
    assert call(f"http://127.0.0.1:{port}", "/api/options")[0] == 200


@contextlib.contextmanager
def served(app: serve.Server, timeout: float = serve.REQUEST_TIMEOUT, start: bool = True):
    """(port, HTTP server) of a logging server for `app` on a free port; `start` False: it
    accepts nothing until the caller calls `serve_forever` in a thread of its own."""
    httpd = serve.make_server(app, "127.0.0.1", 0, timeout=timeout)
    if start:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1], httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_fifty_new_games_at_once_each_get_an_answer_and_the_excess_a_503(monkeypatch, capsys):
    """50 `POST /api/new` at once, arriving before the server accepts any (as when its accept
    loop lags: a listen backlog of 5 left 44 of them unconnected, and a probe saw resets): every
    one is answered; MAX_CONCURRENT are handled (their new_game waits until the others are
    answered) and the others get a JSON 503 with a Retry-After at once, one log line each."""
    clients = 50
    app = serve.Server({serve.UNIFORM: "none"}, serve.UNIFORM)
    lock, inside, most = threading.Lock(), [0], [0]
    release = threading.Event()

    def new_game(request):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        release.wait(30)
        with lock:
            inside[0] -= 1
        return {"game": "g"}

    monkeypatch.setattr(app, "new_game", new_game)
    answers: list[tuple[int | str, dict[str, str], object]] = []
    connected = threading.Semaphore(0)

    def client(port):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError as error:
            answers.append((type(error).__name__, {}, None))
            connected.release()
            return
        connected.release()
        with sock:
            sock.settimeout(60)
            sock.sendall(b"POST /api/new HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            answers.append(parse_answer(read_answer(sock)))

    capsys.readouterr()
    with served(app, start=False) as (port, httpd):
        threads = [threading.Thread(target=client, args=(port,)) for _ in range(clients)]
        for thread in threads:
            thread.start()
        for _ in range(clients):
            assert connected.acquire(timeout=30)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        deadline = time.monotonic() + 30
        while len(answers) + inside[0] < clients and time.monotonic() < deadline:
            time.sleep(0.05)
        release.set()
        for thread in threads:
            thread.join(timeout=60)
    failed = [status for status, _, _ in answers if not isinstance(status, int)]
    assert not failed and len(answers) == clients, f"{len(failed)} got no answer: {failed}"
    busy = [(headers, body) for status, headers, body in answers if status == 503]
    assert sorted({status for status, _, _ in answers}) == [200, 503]
    assert most[0] == serve.MAX_CONCURRENT and len(busy) == clients - serve.MAX_CONCURRENT
    for headers, body in busy:
        assert headers.get("retry-after") == str(serve.BUSY_RETRY_AFTER)
        assert set(body) == {"error"} and "busy" in body["error"] and "retry" in body["error"]
    logged = [line for line in capsys.readouterr().err.splitlines() if " 503 " in line]
    assert len(logged) == len(busy) and all("busy" in line for line in logged), logged


def parse_answer(answer: bytes) -> tuple[int | str, dict[str, str], object]:
    """(status, {lower-case header: value}, JSON body) of an HTTP answer ("no answer": none)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/"):
        return "no answer", {}, None
    status_line, *lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}
    return int(status_line.split()[1]), headers, json.loads(body)


@pytest.mark.parametrize(
    "part, sent, dripped, status, error",
    [
        ("the request line", b"", b"POST /api/ne", None, "Request timed out"),
        ("the headers", b"POST /api/new HTTP/1.1\r\n", b"Host: 127.0.", 408, "headers"),
        (
            "the body",
            b"POST /api/new HTTP/1.1\r\nContent-Length: 100\r\n\r\n",
            b'{"variant": ',
            408,
            "request body did not arrive in time",
        ),
    ],
    ids=["line", "headers", "body"],
)
def test_a_client_that_drips_its_request_is_cut_at_the_request_deadline(
    capsys, part, sent, dripped, status, error
):
    """The timeout is per request, not per read: a client that sends a byte every 0.4 s (each
    read well within 1 s) held its thread as long as it dripped; it is cut 1 s after the start
    of its request, with a JSON 408 once its request line is in (else the connection closes),
    and one log line."""
    timeout = 1.0
    capsys.readouterr()
    with served(serve.Server({serve.UNIFORM: "none"}, serve.UNIFORM), timeout) as (port, _):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            started = time.monotonic()
            sock.sendall(sent)
            drip(sock, dripped)
            answer = read_answer(sock)
            held = time.monotonic() - started
    assert held < timeout + 1.5, f"{part}: the connection was held {held:.1f} s"
    got, _, body = parse_answer(answer)
    if status is None:
        assert answer == b"", answer
    else:
        assert got == status and set(body) == {"error"} and error in body["error"], answer
        assert f"within {timeout:g} s" in body["error"]
    (line,) = capsys.readouterr().err.splitlines()
    assert error in line and "Traceback" not in line


def test_the_server_says_it_is_warming_up_and_when_it_is_done(capsys):
    import types

    calls = []
    app = types.SimpleNamespace(default_model="gardner-cpu", warm_up=lambda: calls.append(1))
    serve.warm_up_and_say(app)
    out = capsys.readouterr().out.splitlines()
    assert calls == [1]
    assert out[0].startswith("warming up: compiling gardner-cpu's search")
    assert out[1].startswith("warmed up in ") and out[1].endswith("games start at once")

    def fails():
        raise RuntimeError("no memory")

    serve.warm_up_and_say(types.SimpleNamespace(default_model="m", warm_up=fails))
    captured = capsys.readouterr()
    assert "warmed up" not in captured.out
    assert captured.err.strip() == "warning: warm-up failed: no memory"
