"""LLM join: left x right pairs under a natural-language condition. The anchor's (left row's) KV is
computed once; each partner plus the condition is added on a fork of it, scored, and dropped."""

from dataclasses import dataclass, field

from quail.executor.engine import Engine
from quail.executor.scheduler import Extend, Program
from quail.executor.sequence import Seq
from quail.executor.stats import Stats
from quail.ops.answers import p_yes
from quail.ops.prompts import AnswerTokens


@dataclass
class JoinResult:
    p_yes: list[list[float]] = field(default_factory=list)  # [left row][right row]


def _anchored(engine: Engine, anchor, partners, n_partner_doc, answers, fanout):
    ids, n_yes = answers.ids, len(answers.yes)

    def program(_):
        seq = Seq()
        yield [Extend(seq, anchor, n_document=len(anchor), prompt=False)]
        probs = []
        for lo in range(0, len(partners), fanout):
            wave = range(lo, min(lo + fanout, len(partners)))
            kids = [engine.cache.fork(seq) for _ in wave]
            reads = yield [
                Extend(k, partners[j], [(len(partners[j]) - 1, ids)], n_partner_doc[j]) for k, j in zip(kids, wave)
            ]
            for k, [lp] in zip(kids, reads):
                probs.append(p_yes(lp, n_yes))
                engine.cache.release(k)
        engine.cache.release(seq)
        return probs

    return program


def _scratch(engine: Engine, anchor, partners, n_partner_doc, answers, fanout):
    ids, n_yes = answers.ids, len(answers.yes)

    def program(_):
        probs = []
        for lo in range(0, len(partners), fanout):
            wave = range(lo, min(lo + fanout, len(partners)))
            reqs = [
                Extend(Seq(), anchor + partners[j], [(len(anchor) + len(partners[j]) - 1, ids)],
                       len(anchor) + n_partner_doc[j])
                for j in wave
            ]
            reads = yield reqs
            for r, [lp] in zip(reqs, reads):
                probs.append(p_yes(lp, n_yes))
                engine.cache.release(r.seq)
        return probs

    return program


def run_join(
    engine: Engine,
    anchors: list[list[int]],
    partner_docs: list[list[int]],
    condition: list[int],
    answers: AnswerTokens,
    reuse: bool = True,
    progress=None,
) -> tuple[JoinResult, Stats]:
    partners = [p + condition for p in partner_docs]
    n_doc = [len(p) for p in partner_docs]
    longest = max((len(p) for p in partners), default=0)
    fanout = max(1, min(len(partners), engine.plan.max_batch_tokens // max(longest, 1)))
    programs = []
    for anchor in anchors:
        if reuse:
            per_kid = 1 + engine.cache.pages_for(longest)
            fan = max(1, min(fanout, (engine.plan.arena_pages - engine.cache.pages_for(len(anchor))) // per_kid))
            pages = engine.cache.pages_for(len(anchor)) + fan * per_kid
            programs.append(Program(_anchored(engine, anchor, partners, n_doc, answers, fan), pages))
        else:
            per_pair = engine.cache.pages_for(len(anchor) + longest)
            fan = max(1, min(fanout, engine.plan.arena_pages // per_pair))
            programs.append(Program(_scratch(engine, anchor, partners, n_doc, answers, fan), fan * per_pair))
    probs, stats = engine.run(programs if partners else [], progress)
    return JoinResult(probs if partners else [[] for _ in anchors]), stats
