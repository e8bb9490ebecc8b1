from dataclasses import dataclass, field


@dataclass(eq=False)
class Seq:
    """One token sequence whose KV lives in the arena: a document, possibly with a question on top.

    `fresh` and `credits` serve the accounting: tokens computed but not yet charged to a prompt, and
    tokens this sequence received from another mechanism ("sharing", "retention") not yet credited.
    """

    tokens: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)
    fresh: int = 0
    credits: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)
