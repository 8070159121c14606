"""Plain-text tables of packing plans, in the manner of the paper's Table 1."""

from __future__ import annotations

from typing import Sequence

from packed_bert_tf.packing.plan import PackingPlan

_COLUMNS = ("algorithm", "packs", "strategies", "padding tokens", "efficiency %",
            "packing factor", "time s", "gap to LP bound")


def format_plan_table(plans: Sequence[PackingPlan],
                      lp_lower_bound_packs: int | None = None) -> str:
    """A fixed-width table of plans of one histogram, one row per plan.

    Args:
      plans: sequence of `PackingPlan`, plans of the same histogram (any
        algorithms).
      lp_lower_bound_packs: int, optional, the LP bound in packs; defaults to
        the best any plan reports. The last column is each plan's packs minus
        this bound ("-" if unknown).
    """
    if lp_lower_bound_packs is None:
        known = [p.lp_lower_bound_packs for p in plans
                 if p.lp_lower_bound_packs is not None]
        lp_lower_bound_packs = max(known) if known else None
    rows = [_COLUMNS]
    for plan in plans:
        gap = "-" if lp_lower_bound_packs is None else \
            f"{plan.num_packs - lp_lower_bound_packs:,}"
        rows.append((plan.algorithm, f"{plan.num_packs:,}", f"{plan.num_strategies:,}",
                     f"{plan.padding_tokens:,}", f"{100 * plan.efficiency:.3f}",
                     f"{plan.packing_factor:.4f}", f"{plan.solve_time_seconds:.2f}",
                     gap))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = []
    for index, row in enumerate(rows):
        cells = [cell.ljust(width) if i == 0 else cell.rjust(width)
                 for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def describe_certificate(plan: PackingPlan) -> str:
    """One line on how good a plan is proven to be: its packs, the bound,
    the gap, and whether the time limit stopped the search.

    >>> from packed_bert_tf.packing import pack_histogram
    >>> describe_certificate(pack_histogram([0, 2, 1, 1], 4, 2))
    'optimal: 3 packs, proven optimal (lower bound 3 packs)'
    """
    bound = plan.lp_lower_bound_packs
    if bound is None:
        text = f"{plan.algorithm}: {plan.num_packs:,} packs, no lower bound"
    elif plan.proven_optimal:
        text = (f"{plan.algorithm}: {plan.num_packs:,} packs, proven optimal "
                f"(lower bound {bound:,} packs)")
    else:
        text = (f"{plan.algorithm}: {plan.num_packs:,} packs, at most "
                f"{100 * plan.certified_gap:.4f} % above the optimum (lower bound "
                f"{bound:,} packs)")
    if plan.time_limit_reached:
        text += f"; the time limit stopped the search after {plan.solve_time_seconds:.1f} s"
    return text
