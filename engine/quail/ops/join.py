"""LLM join: left x right pairs under a natural-language condition. The anchor's (left row's) KV is
computed once; each partner plus the condition is added on a fork of it, scored, and dropped."""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import cast

from quail.executor.engine import Engine
from quail.executor.program import Extend, Program, ProgramGen, program_pages
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.kinds.join import PairQuestion, keys
from quail.ops.calibration import column_means, yes_given
from quail.ops.from_store import with_stored
from quail.ops.prompts import Documents, YesNoTokens
from quail.ops.scoring import p_yes
from quail.ops.stored import Run, Value, YesNo, with_answers
from quail.prefix_tree import stem
from quail.reuse import Retain, Reuse


@dataclass
class JoinResult:
    p_yes: list[list[float]] = field(default_factory=list)  # [left row][right row]
    from_store: set[int] = field(default_factory=set)  # left rows answered from the answer store


def _anchored(engine: Engine, anchor: list[int], partners: list[list[int]], n_partner_doc: list[int], lead: int,
              yes_no: YesNoTokens, fanout: int, retain: Retain | None) -> Callable[[Seq | None], ProgramGen]:
    """lead: the tokens of the condition before each partner (their common opening, with the partners'
    own): computed once per anchor, as the anchor is."""
    ids, n_yes = yes_no.ids, len(yes_no.yes)
    common = stem(partners)  # the partners' common opening is computed once, with the anchor

    def program(seq: Seq | None) -> ProgramGen:
        seq = seq or Seq()
        head = anchor + partners[0][:common]
        if len(seq) < len(head):
            n_document = max(len(anchor) - len(seq), 0) + (0 if lead else min(common, n_partner_doc[0]))
            yield [Extend(seq, head[len(seq):], n_document=n_document, prompt=False)]
        probs = []
        for lo in range(0, len(partners), fanout):
            wave = range(lo, min(lo + fanout, len(partners)))
            kids = [engine.cache.fork(seq) for _ in wave]
            reads = yield [
                Extend(k, partners[j][common:], [(len(partners[j]) - common - 1, ids)],
                       max(lead + n_partner_doc[j] - common, 0) if common >= lead else 0)
                for k, j in zip(kids, wave)
            ]
            for k, [lp] in zip(kids, reads):
                probs.append(p_yes(lp, n_yes))
                engine.cache.release(k)
        engine.cache.rewind(seq, len(anchor))
        engine.pool.keep_or_release(anchor, seq, retain)
        return probs

    return program


def _scratch(engine: Engine, anchor: list[int], partners: list[list[int]], n_partner_doc: list[int], lead: int,
             yes_no: YesNoTokens, fanout: int, retain: Retain | None) -> Callable[[Seq | None], ProgramGen]:
    """Every pair from the anchor's start, or from the reused prefix it was handed."""
    ids, n_yes = yes_no.ids, len(yes_no.yes)

    def program(base: Seq | None) -> ProgramGen:
        have = len(base) if base else 0
        probs = []
        for lo in range(0, len(partners), fanout):
            wave = range(lo, min(lo + fanout, len(partners)))
            seqs = [engine.cache.fork(base, copy_credits=True) if base else Seq() for _ in wave]
            reqs = [
                Extend(s, anchor[have:] + partners[j], [(len(anchor) - have + len(partners[j]) - 1, ids)],
                       len(anchor) - have + (0 if lead else n_partner_doc[j]))
                for s, j in zip(seqs, wave)
            ]
            reads = yield reqs
            for r, [lp] in zip(reqs, reads):
                probs.append(p_yes(lp, n_yes))
                engine.cache.release(r.seq)
        if base is not None:
            engine.pool.keep_or_release(anchor, base, retain)
        return probs

    return program


def run_join(
    engine: Engine,
    anchors: list[list[int]],
    partner_docs: list[list[int]],
    condition: PairQuestion,
    yes_no: YesNoTokens,
    reuse: Reuse = Reuse(),
    retain: Retain | None = None,
    progress: Callable[[int, int], None] | None = None,
    known: list[list[float | None]] | None = None,
    pairs: list[list[int]] | None = None,
) -> tuple[JoinResult, Stats]:
    """pairs: per left row, the right rows it asks, whose P(yes) its row of the result holds in that
    order (None: every right row). known: per left row, each asked pair's P(yes) that the answer
    store holds, or None: a left row with every pair stored is not computed."""
    rows = pairs if pairs is not None else [list(range(len(partner_docs)))] * len(anchors)
    answered = {i: cast(list[float], row) for i, row in enumerate(known or []) if row and None not in row}
    if answered:
        def rest(todo: list[int]) -> tuple[list[list[float]], Stats]:
            r, stats = run_join(engine, [anchors[i] for i in todo], partner_docs, condition, yes_no, reuse, retain,
                                progress, pairs=[rows[i] for i in todo])
            return r.p_yes, stats

        p_yes, stats = with_stored(len(anchors), answered, rest, lambda i: [
            (len(anchors[i]) + len(partner_docs[j]) + len(condition), None) for j in rows[i]], progress)
        return JoinResult(p_yes, set(answered)), stats
    partners = [condition.around(p) for p in partner_docs]
    n_doc = [len(p) for p in partner_docs]
    retain = retain if reuse.retention else None
    make = _anchored if reuse.rewind else _scratch
    programs = []
    laid_out: dict[int, tuple[list[list[int]], list[int], int, int]] = {}  # the full join's rows are one list
    for anchor, row in zip(anchors, rows):
        if id(row) not in laid_out:
            mine = [partners[j] for j in row]
            laid_out[id(row)] = (mine, [n_doc[j] for j in row], stem(mine) if reuse.rewind else 0,
                                 max((len(p) for p in mine), default=0))
        mine, docs, common, longest = laid_out[id(row)]
        fanout = max(1, min(len(mine), engine.settings.max_batch_tokens // max(longest, 1)))
        # rewinding, the anchor and the partners' common opening are kept; the pairs fork them
        pages = partial(program_pages, engine.cache.pages_for, reuse.rewind, len(anchor) + common, longest)
        # as many pairs at once as the arena holds (pages(n): of n pairs at once)
        fan = max(1, min(fanout, (engine.settings.arena_pages - pages(0)) // (pages(1) - pages(0))))
        programs.append(Program(make(engine, anchor, mine, docs, len(condition.lead), yes_no, fan, retain), pages(fan),
                                anchor))
    asks = [i for i, row in enumerate(rows) if row]
    probs, stats = engine.run([programs[i] for i in asks], progress, reuse)
    result = JoinResult([[] for _ in anchors])
    for i, ps in zip(asks, probs):
        result.p_yes[i] = ps
    return result, stats


class JoinAnswers(YesNo):
    """A join's stored answers: each pair's raw P(yes) (before calibration), a key each."""

    def values(self, result: JoinResult) -> Iterable[list[Value | None]]:
        return ([[p] for p in row] for row in result.p_yes)


def stored_join(run: Run, anchors: Documents, partners: Documents, condition: PairQuestion, yes_no: YesNoTokens,
                probes: list[list[int]] | None = None, pairs: list[list[int]] | None = None,
                bias: dict[int, float] | None = None) -> tuple[JoinResult, Stats]:
    """run_join with the answers the store holds, keeping the new ones. `probes`: contextual
    calibration's content-free documents (ops/calibration.py), paired with every right row that a
    left row asks, after the left rows (keeping nothing); each right row's mean P(yes) over them is
    divided out of its pairs. `bias`: the right rows' means found by earlier calls over the same
    tables (a blocked join's tries), which are not asked again, and the new ones are added to it."""
    def asked(lefts: list[list[int]], main: bool, rows: list[list[int]] | None) -> tuple[JoinResult, Stats]:
        return with_answers(run.stored, lambda key: keys(key, condition, lefts, partners.tokens, probes is not None,
                                                         rows),
                            JoinAnswers(), lambda known: run_join(run.engine, lefts, partners.tokens, condition, yes_no,
                                                                  run.reuse, run.retain if main else None,
                                                                  run.progress if main else None, known, rows))

    result, stats = asked(anchors.tokens, True, pairs)
    stats.rows_truncated = anchors.truncated + partners.truncated
    if probes is not None:
        bias = {} if bias is None else bias
        rights = list(range(len(partners.tokens))) if pairs is None else sorted({j for row in pairs for j in row})
        new = [j for j in rights if j not in bias]
        if new:
            probe, probe_stats = asked(probes, False, None if pairs is None else [new] * len(probes))
            bias.update(zip(new, column_means(probe.p_yes)))
            stats.merge(probe_stats)
        rows = pairs if pairs is not None else [rights] * len(result.p_yes)
        result.p_yes = [[yes_given(p, bias[j]) for p, j in zip(ps, row)] for ps, row in zip(result.p_yes, rows)]
    return result, stats
