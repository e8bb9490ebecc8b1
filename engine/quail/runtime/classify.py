"""A classify at run time: each label's probability per row, and the best label."""

import pyarrow as pa

from quail.kinds.classify import Classify
from quail.runtime.base import KindRuntime
from quail.runtime.outputs import scatter


class ClassifyRuntime(KindRuntime):
    kind = Classify()

    def compute(self, session, spec, inputs, reuse, retain, truncate, progress):
        [(texts, rows)] = inputs
        labels = list(spec.labels)
        r, stats = session.classify(texts, labels, spec.questions[0], reuse, retain, truncate, progress, rows,
                                    spec.calibration)
        columns = {"row": pa.array(rows, pa.int64()), "label": pa.array([labels[i] for i in r.labels], pa.string())}
        for k, label in enumerate(labels):
            columns[f"p_{label}"] = pa.array([p[k] for p in r.probabilities], pa.float64())
        return pa.table(columns), stats

    def stored(self, session, spec, docs, partners, probes):
        q = session.layout.label_question(spec.questions[0], list(spec.labels))
        labels = [session.layout.label(x) for x in spec.labels]
        keys = session.classify_keys(q, labels, docs, spec.calibration)
        found = session.answers.get(keys, touch=False)
        prompts = self.stored_all(session, spec, docs, partners)
        return {i: prompts[i] for i, k in enumerate(keys) if k in found}

    def shape(self, spec, answers, tables, source):
        [table] = tables
        names = ["label"] + [f"p_{label}" for label in spec.labels]
        return scatter(answers, table.num_rows, names, source, table)
