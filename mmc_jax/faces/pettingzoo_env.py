"""Every variant as a PettingZoo AEC environment: `mmc_jax.faces.pettingzoo_env.env(spec)`.

    from mmc_jax.faces import pettingzoo_env as aec

    env = aec.env("dark")                      # any playable variant spec of the rule space
    env.reset(seed=0)
    for agent in env.agent_iter():
        observation, reward, termination, truncation, info = env.last()
        if termination or truncation:
            action = None
        else:
            mask = observation["action_mask"]  # int8 [num_actions], 1 = legal
            action = int(np.flatnonzero(mask)[0])
        env.step(action)

As PettingZoo's own chess: agents `player_0` (White) and `player_1` (Black); the observation is
a dict of `observation` (float32 [5, 5, C], the Game contract's observation from that agent's
view) and `action_mask` (int8, the legal actions of the agent to move; all zero for the other);
rewards +1 / -1 / 0 at the end, to the winner and loser. `pettingzoo.test.api_test` passes on it
(`tests/rules/test_aec.py`).

Fair play: the agent not to move observes its own view as its turn would begin now
(`Game.observe_waiting`): under fog or sensing never what the mover sees.

**Sensing variants** (`fog=sense:W`): a turn is two steps by the same agent, a sense (actions
1226 and up) then a move; `env.sense_phase` says which comes next. The game ends by itself
(checkmate, a captured king, the draw rules, the ply cap), so truncations stay False.

Steps run the contract's jitted functions for one game (`Rules` [1]); a batch of games is the
pgx face's business (`mmc_jax.faces.pgx_env`). Needs `pip install 'mmc_jax[pettingzoo]'`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from mmc_jax.rules import contract, notation, variants

try:
    from gymnasium import spaces
    from pettingzoo import AECEnv
except ImportError as error:  # pragma: no cover (an optional extra)
    raise ImportError(
        f"mmc_jax.faces.pettingzoo_env needs pettingzoo ({error}); "
        "pip install 'mmc_jax[pettingzoo]'"
    ) from None

AGENTS = ("player_0", "player_1")  # White, Black


@functools.cache
def _programs(game_name: str):
    """The jitted functions of one game (shared by every env of that game: rules are data)."""
    game = contract.GAMES[game_name]

    def view(rules, state):
        return (
            game.observe(rules, state)[0],
            game.observe_waiting(rules, state)[0],
            game.legal_action_mask(rules, state)[0],
            game.sense_phase(state)[0],
        )

    return {
        "init": jax.jit(game.init),
        "step": jax.jit(lambda rules, state, action: game.step(rules, state, action[None])),
        "view": jax.jit(view),
    }


def env(spec: str, render_mode: str | None = None) -> MinichessEnv:
    """The AEC environment of the variant `spec` (ValueError, in one line, for a misspelt
    spec or a variant without a first move)."""
    canonical = variants.canonical(spec)
    if not variants.is_sense(canonical):
        from mmc_jax import rules as R

        if not R.is_playable(canonical):
            raise ValueError(f"{canonical} has no legal move in its start position: no env")
    return MinichessEnv(canonical, render_mode)


class MinichessEnv(AECEnv):
    """One variant as a PettingZoo AEC environment (module doc)."""

    metadata = {
        "render_modes": ["ansi"],
        "name": "mmc_jax_minichess_v1",
        "is_parallelizable": False,
    }

    def __init__(self, spec: str, render_mode: str | None = None):
        super().__init__()
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode {render_mode!r}: only 'ansi' (or None)")
        self.spec = variants.canonical(spec)
        self.render_mode = render_mode
        self.game = contract.game_for(self.spec)
        self._rules = self.game.batch(self.spec, 1)
        self._run = _programs(self.game.name)
        self.possible_agents = list(AGENTS)
        self.agents = list(AGENTS)
        shape = self.game.observation_shape
        obs_space = spaces.Dict(
            {
                "observation": spaces.Box(0.0, np.inf, shape, np.float32),
                "action_mask": spaces.Box(0, 1, (self.game.num_actions,), np.int8),
            }
        )
        self.observation_spaces = {agent: obs_space for agent in AGENTS}
        self.action_spaces = {agent: spaces.Discrete(self.game.num_actions) for agent in AGENTS}
        self._state = None

    def observation_space(self, agent):
        return self.observation_spaces[agent]

    def action_space(self, agent):
        return self.action_spaces[agent]

    # -- the game -----------------------------------------------------------------------------

    def _refresh(self) -> None:
        """Host copies of what the agents may read of the current state."""
        mover, waiting, mask, sensing = jax.device_get(self._run["view"](self._rules, self._state))
        self._turn = int(np.asarray(self._state.turn)[0])
        self._views = {AGENTS[self._turn]: mover, AGENTS[1 - self._turn]: waiting}
        self._mask = np.asarray(mask, np.int8)
        self.sense_phase = bool(sensing)
        self._terminated = bool(np.asarray(self._state.terminated)[0])

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        del seed, options  # the start position is the variant's; nothing is random
        self.agents = list(AGENTS)
        self._state = self._run["init"](self._rules)
        self._refresh()
        self.rewards = {agent: 0.0 for agent in self.agents}
        self._cumulative_rewards = {agent: 0.0 for agent in self.agents}
        self.terminations = {agent: False for agent in self.agents}
        self.truncations = {agent: False for agent in self.agents}
        self.infos = {agent: {} for agent in self.agents}
        self.agent_selection = AGENTS[self._turn]

    def observe(self, agent: str) -> dict:
        mask = self._mask if agent == self.agent_selection and not self._terminated else None
        return {
            "observation": np.asarray(self._views[agent], np.float32),
            "action_mask": mask if mask is not None else np.zeros_like(self._mask),
        }

    def step(self, action) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        action = int(action)
        if not 0 <= action < self.game.num_actions or not self._mask[action]:
            raise ValueError(
                f"action {action} is not legal for {agent} here (observation['action_mask'])"
            )
        self._cumulative_rewards[agent] = 0.0
        self._state = self._run["step"](self._rules, self._state, jnp.int32(action))
        self._refresh()
        rewards = np.asarray(self._state.rewards)[0]  # [White, Black]
        self.rewards = {AGENTS[0]: float(rewards[0]), AGENTS[1]: float(rewards[1])}
        if self._terminated:
            self.terminations = {a: True for a in self.agents}
        self.agent_selection = AGENTS[self._turn]
        self._accumulate_rewards()
        if self.render_mode == "ansi":
            print(self.render())

    def render(self) -> str:
        """The board as text (rank 5 on top; under fog the true board: a spectator's view)."""
        from mmc_jax import rules as R

        one = jax.tree.map(lambda x: np.asarray(x)[0], self._state)
        fen = R.recon_to_fen(one) if self.game.has_sense_phase else R.to_fen(one)
        board = fen.split()[0]
        rows = notation.board_rows(board)
        return "\n".join(rows) + f"\n{AGENTS[self._turn]} to move\n"

    def close(self) -> None:
        pass
