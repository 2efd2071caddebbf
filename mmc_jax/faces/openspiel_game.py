"""Every variant as an OpenSpiel game: `pyspiel.load_game("mmc_minichess", {"variant": SPEC})`.

    import pyspiel
    import mmc_jax.faces.openspiel_game  # registers the game (a Python game of OpenSpiel)

    game = pyspiel.load_game("mmc_minichess", {"variant": "dark", "max_plies": 80})
    state = game.new_initial_state()
    while not state.is_terminal():
        state.apply_action(state.legal_actions()[0])
    state.returns()                                   # [White, Black]: +1 / -1 / 0

Parameters: `variant` (any playable spec of the rule space, default `gardner`) and `max_plies`
(the rules' ply cap: a game that reaches it is a draw; default 256, the rules' own).

Players 0 (White) and 1 (Black); actions are the rules' ids (1225 board moves; under sensing
also the pass, 1225, and the sense windows, 1226 and up), their strings UCI moves, `pass` and
`sense:w`. Board variants without fog are perfect-information games; `fog=on` (dark) and
`fog=sense:W` (recon) are imperfect-information games (`GameType.information`), whose
observations are the Game contract's, from what the player may know alone:

- observation tensor: the contract's observation planes [5, 5, C] flattened, from the player's
  view (the player not to move: `Game.observe_waiting`, its view as its turn would begin now);
- observation string: that tensor as a board (`*` where the player cannot see, remembered
  pieces under sensing in lower case for the opponent), the side to move and the ply;
- information state (imperfect-information variants; perfect recall): the player's
  observation at each of its decisions so far and the action it took there, as a string, and
  as a tensor of `max_decisions` slots of (observation planes, (action + 1) / num_actions);
  perfect-information variants give the history of actions as their information state string.

The rules run as the contract's jitted functions on one game (`Rules` [1]), a host copy of the
state kept between steps, so OpenSpiel can clone states cheaply; expect milliseconds a step
(a Python game: OpenSpiel's C++ algorithms run on it slowly, as its docs say of Python games).
Needs `pip install 'mmc_jax[openspiel]'`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax.rules import contract, variants

try:
    import pyspiel
except ImportError as error:  # pragma: no cover (an optional extra)
    raise ImportError(
        f"mmc_jax.faces.openspiel_game needs OpenSpiel ({error}); pip install 'mmc_jax[openspiel]'"
    ) from None

SHORT_NAME = "mmc_minichess"
DEFAULTS = {"variant": "gardner", "max_plies": variants.DEFAULT_MAX_PLIES}


def _game_type(information) -> pyspiel.GameType:
    imperfect = information == pyspiel.GameType.Information.IMPERFECT_INFORMATION
    return pyspiel.GameType(
        short_name=SHORT_NAME,
        long_name="mmc_jax 5x5 minichess (any variant of the rule space)",
        dynamics=pyspiel.GameType.Dynamics.SEQUENTIAL,
        chance_mode=pyspiel.GameType.ChanceMode.DETERMINISTIC,
        information=information,
        utility=pyspiel.GameType.Utility.ZERO_SUM,
        reward_model=pyspiel.GameType.RewardModel.TERMINAL,
        max_num_players=2,
        min_num_players=2,
        provides_information_state_string=True,
        provides_information_state_tensor=imperfect,
        provides_observation_string=True,
        provides_observation_tensor=True,
        parameter_specification=dict(DEFAULTS),
    )


@functools.cache
def _programs(game_name: str):
    """The jitted functions of one game of the contract, shared by every variant of it."""
    game = contract.GAMES[game_name]

    def after(rules, state):
        return (
            state,
            game.observe(rules, state)[0],
            game.observe_waiting(rules, state)[0],
            game.legal_action_mask(rules, state)[0],
        )

    return {
        "init": jax.jit(lambda rules: after(rules, game.init(rules))),
        "step": jax.jit(lambda rules, s, a: after(rules, game.step(rules, s, a[None]))),
    }


class MinichessGame(pyspiel.Game):
    """One variant of the rule space as an OpenSpiel game (module doc)."""

    def __init__(self, params=None):
        params = {**DEFAULTS, **(params or {})}
        spec = variants.canonical(str(params["variant"]))
        max_plies = int(params["max_plies"])
        if max_plies < 1:
            raise ValueError(f"max_plies must be a positive integer, got {max_plies}")
        if not variants.is_sense(spec):
            from mmc_jax import rules as R

            if not R.is_playable(spec):
                raise ValueError(f"{spec} has no legal move in its start position: no game")
        game = contract.game_for(spec)
        rules = variants.get(spec, max_plies=max_plies)
        fog = bool(np.asarray(rules.fog)) or game.has_sense_phase
        steps = max_plies * (2 if game.has_sense_phase else 1)
        information = (
            pyspiel.GameType.Information.IMPERFECT_INFORMATION
            if fog
            else pyspiel.GameType.Information.PERFECT_INFORMATION
        )
        info = pyspiel.GameInfo(
            num_distinct_actions=game.num_actions,
            max_chance_outcomes=0,
            num_players=2,
            min_utility=-1.0,
            max_utility=1.0,
            utility_sum=0.0,
            max_game_length=steps,
        )
        super().__init__(_game_type(information), info, {"variant": spec, "max_plies": max_plies})
        # (Attributes after the base's __init__: pybind11 drops those set before it.)
        self.spec, self.max_plies, self.contract_game, self.fog = spec, max_plies, game, fog
        self.rules = jax.tree.map(lambda x: jnp.asarray(x)[None], rules)
        self.max_decisions = (steps + 1) // 2 + 1  # of one player
        self.obs_size = int(np.prod(game.observation_shape))

    def new_initial_state(self):
        return MinichessState(self)

    def make_py_observer(self, iig_obs_type=None, params=None):
        if params:
            raise ValueError(f"observation parameters are not supported, got {params}")
        if iig_obs_type is None or not iig_obs_type.perfect_recall:
            return MinichessObserver(self, "observation")
        return MinichessObserver(self, "information" if self.fog else "history")


class MinichessState(pyspiel.State):
    """A game in progress: the contract's state (host copy), both players' current views and
    each player's decisions so far (module doc)."""

    def __init__(self, game: MinichessGame):
        super().__init__(game)
        # Plain values only: OpenSpiel clones a Python state by deep-copying its attributes.
        self._spec, self._game_name = game.spec, game.contract_game.name
        self._sensing = game.contract_game.has_sense_phase
        self._rules = jax.device_get(game.rules)
        self._set(*jax.device_get(_programs(self._game_name)["init"](self._rules)))
        self.decisions = ([], [])  # per player: (observation, action) at each of its decisions

    def _set(self, state, mover, waiting, mask) -> None:
        self._state = state
        self._turn = int(state.turn[0])
        self._views = {self._turn: mover, 1 - self._turn: waiting}
        self._legal = [int(a) for a in np.flatnonzero(mask)]
        self._over = bool(state.terminated[0])

    def current_player(self):
        return pyspiel.PlayerId.TERMINAL if self._over else self._turn

    def _legal_actions(self, player):
        return list(self._legal) if player == self._turn and not self._over else []

    def _apply_action(self, action):
        if self._over or int(action) not in self._legal:  # OpenSpiel's games refuse, not lose
            where = "the game is over" if self._over else f"player {self._turn} to play"
            raise ValueError(
                f"action {int(action)} is not legal here ({where}); state.legal_actions() "
                "lists the legal ones"
            )
        self.decisions[self._turn].append((self._views[self._turn], int(action)))
        step = _programs(self._game_name)["step"]
        self._set(*jax.device_get(step(self._rules, self._state, np.int32(action))))

    def _action_to_string(self, player, action):
        from mmc_jax import rules as R

        action = int(action)
        if self._sensing:
            own_pawns = int(self._state.pieces[0][0] & self._state.own[0])
            return R.recon.action_to_text(action, self._turn, own_pawns)
        one = jax.tree.map(lambda x: x[0], self._state)
        return R.board_action_to_uci(self._spec, action, self._turn, one.pieces, one.own)

    def is_terminal(self):
        return self._over

    def returns(self):
        if not self._over:
            return [0.0, 0.0]
        return [float(self._state.rewards[0][0]), float(self._state.rewards[0][1])]

    def view(self, player: int) -> np.ndarray:
        """The observation planes of `player` now (fair: what it may know alone)."""
        return self._views[player]

    def fen(self) -> str:
        """The true position's FEN (a spectator's view; no player reads it)."""
        from mmc_jax import rules as R

        one = jax.tree.map(lambda x: x[0], self._state)
        return R.recon_to_fen(one) if self._sensing else R.to_fen(one)

    def __str__(self):
        return self.fen()


def board_text(planes: np.ndarray, sensing: bool) -> str:
    """An observation's board as text, from the tensor alone: own pieces upper case, the
    opponent's lower case (under sensing: as remembered), `*` unseen, `.` empty; rank 5 on top
    of the player's view."""
    hidden = planes[..., 13] if sensing else planes[..., 12]
    rows = []
    for rank in range(4, -1, -1):
        row = ""
        for file in range(5):
            cell = planes[rank, file]
            own = np.flatnonzero(cell[0:6])
            other = np.flatnonzero(cell[6:12])
            if own.size:
                row += "PNBRQK"[own[0]]
            elif other.size:
                row += "pnbrqk"[other[0]]
            elif hidden[rank, file]:
                row += "*"
            else:
                row += "."
        rows.append(row)
    return "/".join(rows)


class MinichessObserver:
    """OpenSpiel's PyObserver (module doc). `kind`: "observation"; "information" (perfect
    recall under fog or sensing: the player's decisions); "history" (perfect recall of a
    perfect-information variant: the actions so far, its tensor the observation's)."""

    def __init__(self, game: MinichessGame, kind: str):
        self.game, self.kind = game, kind
        size = game.obs_size
        if kind == "information":
            self.tensor = np.zeros(game.max_decisions * (size + 1), np.float32)
            self.dict = {"decisions": self.tensor.reshape(game.max_decisions, size + 1)}
        else:
            self.tensor = np.zeros(size, np.float32)
            self.dict = {"observation": self.tensor.reshape(game.contract_game.observation_shape)}

    def set_from(self, state: MinichessState, player: int) -> None:
        self.tensor.fill(0.0)
        if self.kind != "information":
            self.tensor[:] = np.asarray(state.view(player), np.float32).reshape(-1)
            return
        num_actions = self.game.contract_game.num_actions
        slots = self.dict["decisions"]
        history = [*state.decisions[player], (state.view(player), -1)]
        for i, (planes, action) in enumerate(history[: self.game.max_decisions]):
            slots[i, :-1] = np.asarray(planes, np.float32).reshape(-1)
            slots[i, -1] = (action + 1) / num_actions

    def string_from(self, state: MinichessState, player: int) -> str:
        sensing = self.game.contract_game.has_sense_phase
        if self.kind == "history":
            return "history " + " ".join(str(a) for a in state.history())
        if self.kind == "observation":
            planes = np.asarray(state.view(player))
            side = "w" if state.current_player() == 0 else "b"
            return f"{board_text(planes, sensing)} {side} ply {len(state.history())}"
        parts = [
            f"{board_text(np.asarray(planes), sensing)} -> {action}"
            for planes, action in state.decisions[player]
        ]
        parts.append(board_text(np.asarray(state.view(player)), sensing))
        return f"p{player}: " + " | ".join(parts)


pyspiel.register_game(_game_type(pyspiel.GameType.Information.IMPERFECT_INFORMATION), MinichessGame)
