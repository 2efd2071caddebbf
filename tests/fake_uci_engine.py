"""A fake UCI engine for tests/uci/test_uci.py: `python fake_uci_engine.py MODE [N]`.

It speaks enough UCI for `mmc_jax.uci` (uci / setoption / isready / ucinewgame / position /
go perft 1 / go ... / quit), answers `go perft 1` with pyffish's legal moves (so the probe
passes) and plays the first legal move, except:

  crash      exits with status 3 at the N-th `go` search (default 1)
  hang       never answers the N-th `go` search
  illegal    answers the N-th search with `bestmove a1a5` (never legal at the start)
  garbage    answers the N-th search with `bestmove zz99`
  none       answers the N-th search with `bestmove (none)`
  novariant  lists no minichess variant in UCI_Variant
  wrongrules answers `go perft 1` with one move missing
  good       plays legal moves only
"""

import sys

import pyffish as sf

mode = sys.argv[1]
nth = int(sys.argv[2]) if len(sys.argv) > 2 else 1
variants = ["chess"] if mode == "novariant" else ["chess", "gardner", "babychess"]
variant, fen, moves, searches = "chess", None, [], 0


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words[0] == "uci":
        out("id name FakeEngine " + mode)
        out(
            "option name UCI_Variant type combo default chess "
            + " ".join(f"var {v}" for v in variants)
        )
        out("option name VariantPath type string default <empty>")
        out("option name Skill Level type spin default 20 min -20 max 20")
        out("uciok")
    elif words[:3] == ["setoption", "name", "VariantPath"]:
        sf.load_variant_config(open(" ".join(words[4:])).read())
    elif words[:3] == ["setoption", "name", "UCI_Variant"]:
        variant = words[4]
    elif words[0] == "isready":
        out("readyok")
    elif words[0] == "position":
        fen = " ".join(words[2:8])
        moves = words[9:] if len(words) > 8 and words[8] == "moves" else []
    elif words[:3] == ["go", "perft", "1"]:
        legal = sorted(sf.legal_moves(variant, fen, moves))
        if mode == "wrongrules":
            legal = legal[1:]
        for move in legal:
            out(f"{move}: 1")
        out("")
        out(f"Nodes searched: {len(legal)}")
    elif words[0] == "go":
        searches += 1
        if searches == nth and mode == "crash":
            sys.exit(3)
        if searches == nth and mode == "hang":
            continue
        legal = sorted(sf.legal_moves(variant, fen, moves))
        move = legal[0] if legal else "(none)"
        if searches == nth:
            move = {"illegal": "a1a5", "garbage": "zz99", "none": "(none)"}.get(mode, move)
        out(f"bestmove {move}")
    elif words[0] == "quit":
        break
