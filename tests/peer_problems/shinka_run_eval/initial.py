"""A step size for a fixed-point iteration (evobus's own test problem, in ShinkaEvolve's layout,
the way most of its examples score: ``evaluate.py`` hands ``run_experiment`` to
``run_shinka_eval``). The code between the EVOLVE-BLOCK markers evolves."""


# EVOLVE-BLOCK-START
def step_size() -> float:
    """How far each iteration moves towards its target: 1.0 lands on it at once."""
    return 0.25


# EVOLVE-BLOCK-END


def run_experiment(target: float, steps: int) -> dict[str, float]:
    """Iterate from 0 towards ``target``; how far from it ``steps`` iterations end."""
    x = 0.0
    for _ in range(steps):
        x += step_size() * (target - x)
    return {"error": abs(target - x), "target": target}
