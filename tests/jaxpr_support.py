"""Walking a jaxpr: the jaxprs inside an equation and every equation of a program, as one
platform lowers it (shared by the tests that read what a program contains)."""

from jax.extend import core as jcore


def subjaxprs(eqn, platform: str):
    """The jaxprs an equation runs on `platform`: of a `lax.platform_dependent` cond only the
    branch that platform lowers."""
    if eqn.primitive.name == "cond" and eqn.params.get("branches_platforms") is not None:
        platforms = eqn.params["branches_platforms"]
        chosen = [i for i, ps in enumerate(platforms) if ps is not None and platform in ps]
        chosen = chosen or [platforms.index(None)]
        return [eqn.params["branches"][chosen[0]].jaxpr]
    found = []
    for value in eqn.params.values():
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, jcore.ClosedJaxpr):
                found.append(item.jaxpr)
            elif isinstance(item, jcore.Jaxpr):
                found.append(item)
    return found


def eqns(jaxpr, platform: str):
    """Every equation of `jaxpr` and of the jaxprs inside it, as `platform` runs them."""
    for eqn in jaxpr.eqns:
        yield eqn
        for sub in subjaxprs(eqn, platform):
            yield from eqns(sub, platform)
