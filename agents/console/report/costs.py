"""The report's "Costs" section: what every candidate cost, and the overheads.

The numbers are the orchestrator's (``campaign_finished``'s summary, ``costs``: each applied
result's tokens and evaluation seconds charged once, to a candidate or a named overhead,
agents/roles/orchestrator/tally.py), so the rows add up to the summary's totals. A log without
them (a campaign unfinished, or run before they were recorded) gets each candidate's tokens
from its events instead, as the accepted table counts them.
"""

from __future__ import annotations

import html

from evobus.agents.console.report.series import SEED_ID, Run
from evobus.schemas.campaign import Cost

# The staleness policy's actions that end a step before its child is evaluated.
STALE_ENDS = ("discard", "repair_discarded")
COLUMNS = ("operator", "parents", "outcome", "tokens", "model calls", "evaluations", "eval (s)")


def outcome(run: Run, candidate_id: str) -> str:
    """What became of a candidate, as its events say."""
    if candidate_id == SEED_ID:
        return "seed"
    if any(a.candidate_id == candidate_id for a in run.accepted):
        return "accepted"
    if candidate_id in run.rejected:
        return "rejected"
    if candidate_id in run.filtered:
        return "filtered"
    if any(s.candidate_id == candidate_id and s.action in STALE_ENDS for s in run.stale):
        return "stale"
    return "not decided"


def _cells(cost: Cost) -> str:
    return (
        f"<td class=num>{cost.tokens}</td><td class=num>{cost.model_calls}</td>"
        f"<td class=num>{cost.evaluations}</td><td class=num>{cost.eval_seconds:.3f}</td>"
    )


def _sum(costs: list[Cost]) -> Cost:
    return Cost(
        tokens=sum(c.tokens for c in costs),
        model_calls=sum(c.model_calls for c in costs),
        evaluations=sum(c.evaluations for c in costs),
        eval_seconds=round(sum(c.eval_seconds for c in costs), 3),
    )


def _candidate_row(run: Run, candidate_id: str, cost: str) -> str:
    proposal = run.proposed.get(candidate_id)
    operator = proposal.operator if proposal else ("seed" if candidate_id == SEED_ID else "?")
    parents = "+".join(proposal.parent_ids) if proposal else ""
    # The id is the row's header: the accepted table's cells name only accepted candidates.
    return (
        f"<tr><th scope=row>{html.escape(candidate_id)}</th><td>{html.escape(operator)}</td>"
        f"<td>{html.escape(parents)}</td><td>{outcome(run, candidate_id)}</td>{cost}</tr>"
    )


def costs_section(run: Run) -> str:
    """The "Costs" heading, every candidate's row (the seed's and those proposed; from the
    summary, any other it charged), the overheads and the totals."""
    head = "<tr><th>candidate</th>" + "".join(f"<th>{h}</th>" for h in COLUMNS) + "</tr>"
    summary = run.summary
    costs = summary.costs if summary is not None else None
    if summary is None or costs is None:
        ids = sorted({SEED_ID, *run.proposed})
        rows = [
            _candidate_row(
                run,
                cid,
                f"<td class=num>{run.tokens(cid)}</td><td>n/a</td><td>n/a</td><td>n/a</td>",
            )
            for cid in ids
        ]
        return (
            "<h2>Costs</h2>\n<p>This log holds no costs (a campaign unfinished, or run before "
            "they were recorded): each candidate's tokens from its events "
            "(<code>candidate_proposed</code>, <code>candidate_evaluated</code>).</p>\n"
            f"<table>\n{head}\n" + "\n".join(rows) + "\n</table>\n"
        )
    ids = sorted({SEED_ID, *run.proposed, *costs.candidates})
    rows = [_candidate_row(run, cid, _cells(costs.candidates.get(cid, Cost()))) for cid in ids]
    blank = "<td></td><td></td><td></td>"
    every = [*costs.candidates.values(), *costs.overheads.values()]
    rows += [
        f"<tr><th scope=row>{html.escape(name)}</th>{blank}{_cells(cost)}</tr>"
        for name, cost in costs.overheads.items()
    ]
    total = Cost(
        tokens=summary.tokens,
        model_calls=summary.model_calls,
        evaluations=summary.evaluations,
        eval_seconds=summary.eval_seconds,
    )
    rows.append(f"<tr><th scope=row>total</th>{blank}{_cells(total)}</tr>")
    agree = "" if _sum(every) == total else " (they do not add up to the total: a bug)"
    return (
        f"<h2>Costs</h2>\n<p>What each of the {len(ids)} candidates cost — the work of the step "
        "that made it (its parents' scoring on the step's minibatch, the diagnosis, the "
        "proposal, a repair, its own evaluation), its validations, and for the seed its "
        "scoring — then the overheads no candidate caused, and the campaign's totals; "
        f"tokens are prompt + completion tokens as the server counted them{agree}.</p>\n"
        f"<table>\n{head}\n" + "\n".join(rows) + "\n</table>\n"
    )
