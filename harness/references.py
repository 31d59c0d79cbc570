"""The papers the harness implements, in one table: docstrings, configs and the report cite them by
short name (``dsbd``, ``mtad``, ``mcsd``, ``adaptive``, ``energy``; the methods the field compares against:
``medusa``, ``eagle``, ``eagle2``, ``specdecpp``, ``pld``, ``lookahead``), never as "seed 00x".

``seed`` in this project is the RNG seed only. The first five short names map to the papers that the project was
built from (shipped as text beside it); ``CITATION.cff`` lists the same entries.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reference:
    key: str  # short name used in code, configs and the report
    title: str
    authors: str
    year: int
    venue: str
    arxiv: str | None  # arXiv id, None where the paper has none we could confirm
    url: str

    def cite(self) -> str:
        """``Qin et al. 2025 (arXiv:2409.16560)``: the short citation used in captions and docstrings."""
        first = self.authors.split(",")[0].split()[-1] + (" et al." if "," in self.authors else "")
        ident = f"arXiv:{self.arxiv}" if self.arxiv else self.url
        return f"{first} {self.year} ({ident})"


REFERENCES: dict[str, Reference] = {r.key: r for r in (
    Reference("dsbd", "Dynamic-Width Speculative Beam Decoding for LLM Inference",
              "Zongyue Qin, Zifan He, Neha Prakriya, Jason Cong, Yizhou Sun", 2025, "AAAI 2025",
              "2409.16560", "https://arxiv.org/abs/2409.16560"),
    Reference("mtad", "Optimized Multi-Token Joint Decoding with Auxiliary Model for LLM Inference",
              "Zongyue Qin, Ziniu Hu, Zifan He, Neha Prakriya, Jason Cong, Yizhou Sun", 2025, "ICLR 2025",
              "2407.09722", "https://arxiv.org/abs/2407.09722"),
    Reference("mcsd", "Improving Multi-candidate Speculative Decoding",
              "Xiaofan Lu, Yixiao Zeng, Feiyang Ma, Zixu Yu, Marco Levorato", 2024, "arXiv preprint",
              "2409.10644", "https://arxiv.org/abs/2409.10644"),
    Reference("adaptive",
              "A Drop-In Solution for On-the-Fly Adaptation of Speculative Decoding in Large Language Models",
              "Jiesong Liu, Brian Park, Xipeng Shen", 2025, "ACL 2025 (long), pp. 9778-9794",
              None, "https://aclanthology.org/2025.acl-long.482/"),
    Reference("energy", "Accurate and Convenient Energy Measurements for GPUs: A Detailed Study of NVIDIA GPU's "
              "Built-In Power Sensor", "Zeyu Yang, Karel Adamek, Wesley Armour", 2023, "arXiv preprint (SC 2024)",
              "2312.02741", "https://arxiv.org/abs/2312.02741"),
    Reference("medusa", "Medusa: Simple LLM Inference Acceleration Framework with Multiple Decoding Heads",
              "Tianle Cai, Yuhong Li, Zhengyang Geng, Hongwu Peng, Jason D. Lee, Deming Chen, Tri Dao", 2024,
              "ICML 2024",
              "2401.10774", "https://arxiv.org/abs/2401.10774"),
    Reference("eagle", "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty",
              "Yuhui Li, Fangyun Wei, Chao Zhang, Hongyang Zhang", 2024, "ICML 2024",
              "2401.15077", "https://arxiv.org/abs/2401.15077"),
    Reference("eagle2", "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees",
              "Yuhui Li, Fangyun Wei, Chao Zhang, Hongyang Zhang", 2024, "EMNLP 2024",
              "2406.16858", "https://arxiv.org/abs/2406.16858"),
    Reference("specdecpp", "SpecDec++: Boosting Speculative Decoding via Adaptive Candidate Lengths",
              "Kaixuan Huang, Xudong Guo, Mengdi Wang", 2024, "COLM 2025",
              "2405.19715", "https://arxiv.org/abs/2405.19715"),
    Reference("pld", "Prompt Lookup Decoding", "Apoorv Saxena", 2023, "GitHub repository (software)", None,
              "https://github.com/apoorvumang/prompt-lookup-decoding"),
    Reference("lookahead", "Break the Sequential Dependency of LLM Inference Using Lookahead Decoding",
              "Yichao Fu, Peter Bailis, Ion Stoica, Hao Zhang", 2024, "ICML 2024 (PMLR 235)",
              "2402.02057", "https://arxiv.org/abs/2402.02057"),
)}

#: The shipped paper texts (``../shared/seeds/NNN_*.txt``) by short name, for readers of old notes.
SEED_FILES: dict[str, tuple[str, ...]] = {"dsbd": ("000", "001"), "mtad": ("002",), "mcsd": ("003",),
                                          "adaptive": ("004",)}


def ref(key: str) -> Reference:
    """The reference for a short name (KeyError naming the valid ones)."""
    try:
        return REFERENCES[key]
    except KeyError:
        raise KeyError(f"unknown reference {key!r}; valid: {', '.join(REFERENCES)}") from None
