"""The papers' printed figures, for printing beside ours where a row is comparable (same pair and dataset).

Transcribed from the papers' tables (``../shared/seeds``; short names in :mod:`harness.references`). Keys use
the papers' own names; :data:`PAIRS` maps the harness's pair configs (``conf/pair``) to them and
:data:`DATASETS` the dataset configs. A value is the text the paper prints. Hardware per paper in
:data:`GPU`.
"""
from __future__ import annotations

GPU = {"dsbd": "L40", "mtad": "L40", "mcsd": "RTX 4090", "adaptive": "A100 / V100 / RTX 4090"}

#: harness pair config -> the paper's name for the pair, per paper
PAIRS: dict[str, dict[str, str | tuple[str, str]]] = {
    "dsbd": {"llama2_13b_68m": "Llama-2", "opt_13b_125m": "OPT", "llama31_8b_32_1b": "Llama-3"},
    "mtad": {"llama2_13b_68m": "Llama-2", "opt_13b_125m": "OPT"},
    "mcsd": {"llama2_7b_chat_68m": ("Llama 2-7B Chat", "Llama-68M"), "vicuna_7b_68m": ("Vicuna-7B", "Llama-68M"),
             "llama2_7b_chat_tinyllama": ("Llama 2-7B Chat", "TinyLlama-1.1B"),
             "vicuna_7b_tinyllama": ("Vicuna-7B", "TinyLlama-1.1B")},
    "adaptive": {"llama2_70b_chat_7b_chat": "LLaMA 70B/7B", "llama2_70b_chat_13b_chat": "LLaMA 70B/13B",
                 "bloom_7b1_560m": "BLOOM 7B/560M", "bloom_7b1_1b1": "BLOOM 7B/1B1", "opt_13b_125m": "OPT 13B/125M",
                 "dolly_12b_3b": "Dolly 12B/3B", "llama2_70b_chat_multi": "LLaMA 70B", "bloom_7b1_multi": "BLOOM 7B"},
}
#: harness dataset config -> the paper's dataset name (alpaca stands in for ChatAlpaca / finance-alpaca)
DATASETS = {
    "dsbd": {"squad": "SQuAD", "spider": "Spider", "mt_bench": "MT-Bench"},
    "mtad": {"chatgpt_prompts": "CP", "alpaca": "CA", "cnndm": "CD", "spider": "SP", "mt_bench": "MT"},
    "mcsd": {"mt_bench": "MT-Bench", "alpaca": "Alpaca", "triviaqa": "TriviaQA"},
    "adaptive": {"alpaca": "finance-alpaca", "humaneval": "humaneval", "gsm8k": "gsm8k", "xsum": "xsum"},
}
GPUS = {"a100": "A100", "v100": "V100", "rtx4090": "4090", "l40": "L40"}

# dsbd (000) Table 1 / (001) Table 2: (pair, dataset) -> method -> (EM/EA, PPL, tokens/s, J/token)
DSBD_TABLE1 = {
    ("Llama-2", "SQuAD"): {"Multinomial": ("74", "1.82", "21.14", "12.36"),
                           "SpecDecode": ("75", "1.79", "27.11", "8.34"),
                           "SpecInfer": ("74", "1.78", "27.15", "9.22"), "DSBD": ("86", "1.54", "26.67", "8.75")},
    ("OPT", "SQuAD"): {"Multinomial": ("66", "1.98", "23.47", "11.14"), "SpecDecode": ("66", "1.94", "39.68", "5.25"),
                       "SpecInfer": ("66", "1.95", "38.73", "6.30"), "DSBD": ("73", "1.59", "36.76", "5.54")},
    ("Llama-2", "Spider"): {"Multinomial": ("20", "1.37", "21.98", "11.14"),
                            "SpecDecode": ("19", "1.38", "31.74", "7.06"),
                            "SpecInfer": ("19", "1.36", "32.00", "8.01"), "DSBD": ("31", "1.26", "30.30", "7.17")},
    ("OPT", "Spider"): {"Multinomial": ("0", "1.90", "23.81", "11.58"), "SpecDecode": ("0", "1.85", "37.17", "5.92"),
                        "SpecInfer": ("0", "1.91", "37.73", "6.34"), "DSBD": ("1", "1.64", "34.48", "6.23")},
}
# dsbd (001) Table 1, MT-Bench (GPT-4 score, tokens/s, J/token)
DSBD_MTBENCH = {
    "Llama-2": {"SpecInfer": ("2.86", "21.8", "21.2"), "Beam (W=5)": ("3.51", "12.1", "26.3"),
                "DSBD": ("3.52", "16.5", "16.1")},
    "Llama-3": {"SpecInfer": ("3.46", "20.2", "19.8"), "Beam (W=5)": ("4.10", "10.5", "33.3"),
                "DSBD": ("4.11", "17.8", "22.9")},
}
DSBD_ISO = {"speedup": "1.5-1.9×", "energy_reduction": "1.8-2.5×"}  # §4.2, at fixed effectiveness

# mtad Table 3 (its figures are Table 4's ChatAlpaca column): pair -> method -> (tokens/s, J/token)
MTAD_TABLE3 = {"OPT": {"MS": ("23.8", "11.3"), "SPEC": ("35.6", "5.74")},
               "Llama-2": {"MS": ("22.0", "11.2"), "SPEC": ("31.6", "6.97")}}
# mtad Table 4: (dataset, pair) -> measure -> (speculative, BiLD, Spectr, SpecInfer, MTAD)
MTAD_TABLE4 = {
    ("CP", "Llama-2"): {"speed": ("36.8", "34.4", "45.1", "29.7", "63.0"),
                        "energy": ("6.62", "7.45", "5.17", "9.52", "3.38"),
                        "perplexity": ("3.64", "3.15", "3.64", "3.64", "2.06")},
    ("CP", "OPT"): {"speed": ("33.8", "31.5", "38.0", "32.8", "55.8"),
                    "energy": ("7.48", "8.75", "6.08", "10.3", "3.61"),
                    "perplexity": ("5.47", "4.51", "5.27", "5.12", "3.00")},
    ("CA", "Llama-2"): {"speed": ("31.6", "28.8", "27.7", "26.5", "44.1"),
                        "energy": ("6.98", "7.99", "7.20", "7.52", "4.72"),
                        "perplexity": ("2.13", "1.95", "2.15", "2.15", "1.88")},
    ("CA", "OPT"): {"speed": ("35.6", "38.5", "28.4", "31.4", "49.6"),
                    "energy": ("5.74", "5.12", "6.24", "8.68", "4.03"),
                    "perplexity": ("3.32", "2.60", "3.16", "3.42", "2.07")},
    ("CD", "Llama-2"): {"speed": ("30.7", "30.5", "25.0", "24.6", "44.2"),
                        "energy": ("7.07", "7.41", "8.22", "7.59", "4.80"),
                        "perplexity": ("2.87", "2.93", "3.06", "2.92", "2.63")},
    ("CD", "OPT"): {"speed": ("31.7", "30.9", "23.7", "25.7", "43.6"),
                    "energy": ("6.37", "6.71", "7.31", "8.03", "4.86"),
                    "perplexity": ("3.97", "3.74", "4.04", "3.92", "3.17")},
    ("SP", "Llama-2"): {"speed": ("24.0", "26.2", "24.2", "23.8", "26.4"),
                        "energy": ("10.75", "9.84", "11.0", "11.0", "9.01"),
                        "perplexity": ("2.26", "2.13", "2.29", "2.29", "1.87")},
    ("SP", "OPT"): {"speed": ("24.6", "29.9", "19.8", "24.1", "34.4"),
                    "energy": ("15.6", "13.6", "20.1", "16.9", "11.7"),
                    "perplexity": ("2.30", "1.90", "2.20", "2.21", "1.63")},
    ("MT", "Llama-2"): {"speed": ("23.0", "23.7", "19.1", "23.7", "29.4"),
                        "energy": ("7.99", "7.40", "9.27", "9.20", "6.71"),
                        "perplexity": ("3.64", "3.44", "3.64", "3.63", "2.21")},
    ("MT", "OPT"): {"speed": ("34.0", "44.7", "28.7", "28.5", "48.0"),
                    "energy": ("12.1", "6.23", "12.9", "13.2", "6.11"),
                    "perplexity": ("2.02", "1.50", "1.97", "1.99", "1.10")},
}
MTAD_METHODS = ("speculative", "BiLD", "Spectr", "SpecInfer", "MTAD")
# mtad Table 5: block efficiency across datasets, method -> (Llama-2, OPT)
MTAD_TABLE5 = {"speculative": ("2.02±0.05", "2.60±0.06"), "BiLD": ("1.83±0.10", "2.68±0.36"),
               "Spectr": ("2.73±0.43", "3.45±0.42"), "SpecInfer": ("2.74±0.46", "3.45±0.40"),
               "MTAD": ("3.17±0.43", "4.30±0.03")}
# mtad Table 7 (ChatGPT-Prompts): pair -> measure -> beams 2, 4, 6, 8
MTAD_TABLE7 = {"Llama-2": {"speed": ("55.9", "59.9", "60.2", "61.3"), "energy": ("2.43", "2.25", "2.22", "2.20"),
                           "perplexity": ("2.44", "2.12", "2.14", "2.10")},
               "OPT": {"speed": ("51.0", "54.1", "54.3", "55.9"), "energy": ("2.50", "2.32", "2.36", "2.30"),
                       "perplexity": ("3.63", "3.16", "3.42", "3.19")}}
# mtad Table 12 (Llama-2, ChatGPT-Prompts): (k, p) -> (AR PPL, AR tok/s, SpD PPL, SpD tok/s, MTAD PPL, MTAD tok/s)
MTAD_TABLE12 = {(20, 0.9): ("3.74", "22.6", "3.64", "36.8", "2.06", "63.0"),
                (20, 0.8): ("3.06", "22.7", "3.10", "38.5", "1.93", "58.8"),
                (10, 0.9): ("3.03", "22.7", "3.22", "38.5", "1.95", "62.5"),
                (10, 0.8): ("2.56", "22.7", "2.53", "40.0", "1.80", "62.5")}

# mtad App. C's pairs, kept to their own tables (§5's tables show §5's pairs): harness pair -> (its tables, the
# paper's name there). Table 11's names are also Table 15's family columns (L: Llama-2, O: OPT) their settings follow.
MTAD_APPENDIX_PAIRS = {"llama31_8b_32_1b": ("9-10", "Llama-3"),
                       "llama31_8b_32_1b_instruct": ("9-10", "Llama-3-Instruct"),
                       "opt_30b_350m": ("11", "OPT"), "llama2_70b_chat_7b_chat": ("11", "Llama-2")}
MTAD_APPENDIX_DATASETS = {"spider": "SP", "mt_bench": "MT", "humaneval": "HumanEval"}  # Tables 9-10's datasets
# mtad Table 9 (App. C.1): (pair, dataset) -> (multinomial score, multinomial ppl, MTJD score, MTJD ppl); score: Spider
# accuracy (%), MT-Bench score, HumanEval pass@1 (%)
MTAD_TABLE9: dict[tuple, tuple[str, ...]] = {
    ("Llama-3", "SP"): ("22.0", "2.58", "52.5", "1.16"), ("Llama-3", "MT"): ("3.40", "2.40", "3.77", "1.32"),
    ("Llama-3", "HumanEval"): ("15.9", "2.09", "36.6", "1.26"),
    ("Llama-3-Instruct", "SP"): ("36.0", "2.23", "60.5", "1.18"),
    ("Llama-3-Instruct", "MT"): ("4.11", "1.91", "4.40", "1.27"),
    ("Llama-3-Instruct", "HumanEval"): ("28.0", "1.85", "49.4", "1.15")}
# mtad Table 10 (App. C.2): (dataset, pair) -> (tokens/s, J/token, score) -> (BiLD, Typical, spec, spectr, specinfer,
# MCSS, MTAD); score as Table 9's
MTAD_TABLE10: dict[tuple, tuple[tuple[str, ...], ...]] = {
    ("SP", "Llama-3-Instruct"): (("20.1", "22.3", "19.6", "22.4", "21.1", "21.7", "23.5"),
                                 ("10.2", "9.5", "10.5", "9.6", "10.2", "10.0", "9.2"),
                                 ("35.0", "42.0", "36.0", "35.5", "37.0", "35.0", "44.0")),
    ("SP", "Llama-3"): (("23.3", "32.3", "31.1", "32.1", "32.6", "32.7", "33.3"),
                        ("8.2", "7.9", "7.5", "7.1", "8.1", "8.0", "7.8"),
                        ("30.5", "29.5", "21.5", "23.0", "21.5", "24.0", "35.0")),
    ("MT", "Llama-3-Instruct"): (("25.9", "23.4", "26.0", "26.2", "26.3", "26.8", "29.8"),
                                 ("10.8", "12.2", "10.0", "9.9", "10.0", "9.9", "9.2"),
                                 ("4.15", "4.26", "4.1", "4.11", "4.01", "4.02", "4.40")),
    ("MT", "Llama-3"): (("24.5", "22.3", "24.1", "24.5", "24.5", "25.7", "28.2"),
                        ("11.5", "12.4", "11.0", "11.6", "11.7", "11.1", "10.0"),
                        ("3.41", "3.24", "3.39", "3.41", "3.35", "3.36", "3.75")),
    ("HumanEval", "Llama-3-Instruct"): (("17.4", "21.7", "22.2", "23.8", "22.8", "23.7", "24.8"),
                                        ("10.0", "8.1", "7.8", "7.8", "7.9", "7.8", "7.6"),
                                        ("37.8", "35.9", "32.9", "32.9", "31.0", "32.0", "38.4")),
    ("HumanEval", "Llama-3"): (("19.6", "22.5", "22.2", "24.4", "22.5", "23.8", "25.6"),
                               ("9.7", "8.9", "8.9", "8.9", "8.1", "7.9", "7.6"),
                               ("19.5", "20.0", "15.9", "16.0", "17.7", "17.0", "22.0")),
}
# mtad Table 11 (App. C.3), mean ± s.d. across datasets: pair -> (speed, energy, perplexity) -> (speculative, BiLD,
# Spectr, SpecInfer, MTAD)
MTAD_TABLE11: dict[str | None, tuple[tuple[str, ...], ...]] = {
    "Llama-2": (("8.37±3.07", "8.64±3.50", "9.11±3.03", "8.87±2.82", "9.53±3.29"),
                ("138±87.7", "142±99.7", "122±66.4", "125±65.4", "119±67.7"),
                ("1.77±0.22", "1.69±0.25", "1.73±0.24", "1.73±0.24", "1.52±0.19")),
    "OPT": (("15.3±1.64", "14.5±1.96", "17.0±4.14", "17.4±4.00", "19.5±4.11"),
            ("72.4±11.5", "79.6±3.03", "68.2±16.7", "62.4±10.3", "60.0±12.8"),
            ("4.74±1.96", "3.50±1.42", "4.55±1.93", "4.49±1.95", "2.74±0.87")),
}

# mcsd Table 1 (T 0.7, MT-Bench score; AR Llama-2-7B: 6.29): n_t -> draft -> text
MCSD_TABLE1 = {2: {"TinyLlama-1.1B": "5.07 (-1.22)", "Llama-68M": "5.83 (-0.43)"},
               3: {"TinyLlama-1.1B": "4.32 (-1.97)", "Llama-68M": "5.69 (-0.6)"}}
# mcsd Tables 2 (T 0.7) and 3 (T 1), Llama-68M draft: dataset -> method -> (Llama 2-7B Chat, Vicuna-7B)
MCSD_TABLE2 = {"MT-Bench": {"SD": ("0.17", "0.18"), "MCSD": ("0.29", "0.31"), "ours": ("0.47", "0.40")},
               "TriviaQA": {"SD": ("0.15", "0.21"), "MCSD": ("0.21", "0.33"), "ours": ("0.53", "0.51")},
               "Alpaca": {"SD": ("0.20", "0.21"), "MCSD": ("0.34", "0.35"), "ours": ("0.52", "0.46")}}
MCSD_TABLE3 = {"MT-Bench": {"SD": ("0.11", "0.13"), "MCSD": ("0.20", "0.23"), "ours": ("0.74", "0.75")},
               "Alpaca": {"SD": ("0.13", "0.13"), "MCSD": ("0.23", "0.23"), "ours": ("0.75", "0.79")},
               "TriviaQA": {"SD": ("0.12", "0.14"), "MCSD": ("0.21", "0.21"), "ours": ("0.75", "0.80")}}
# mcsd Table 4 (ours, D 5, W 16): (dataset, draft, temperature) -> (Llama 2-7B Chat, Vicuna-7B)
MCSD_TABLE4 = {("MT-Bench", "Llama-68M", 0): ("0.76", "0.77"), ("MT-Bench", "TinyLlama-1.1B", 0): ("0.93", "0.93"),
               ("MT-Bench", "Llama-68M", 1): ("0.74", "0.75"), ("MT-Bench", "TinyLlama-1.1B", 1): ("0.95", "0.95"),
               ("Alpaca", "Llama-68M", 0): ("0.80", "0.83"), ("Alpaca", "TinyLlama-1.1B", 0): ("0.92", "0.94"),
               ("Alpaca", "Llama-68M", 1): ("0.75", "0.79"), ("Alpaca", "TinyLlama-1.1B", 1): ("0.93", "0.95"),
               ("TriviaQA", "Llama-68M", 0): ("0.86", "0.91"), ("TriviaQA", "TinyLlama-1.1B", 0): ("0.96", "0.94"),
               ("TriviaQA", "Llama-68M", 1): ("0.75", "0.80"), ("TriviaQA", "TinyLlama-1.1B", 1): ("0.93", "0.94")}

# adaptive Table 2: (pair, dataset) -> gpu -> (SPS, ARS); "-" = not runnable there
ADAPTIVE_TABLE2 = {
    ("LLaMA 70B/7B", "finance-alpaca"): {"A100": ("6.43%", "2.11×")},
    ("LLaMA 70B/13B", "finance-alpaca"): {"A100": ("4.89%", "1.90×")},
    ("BLOOM 7B/560M", "finance-alpaca"): {"A100": ("4.28%", "1.05×"), "V100": ("7.69%", "1.15×"),
                                          "4090": ("3.70%", "1.22×")},
    ("BLOOM 7B/1B1", "finance-alpaca"): {"A100": ("4.36%", "1.04×"), "V100": ("3.20%", "1.15×"),
                                         "4090": ("3.29%", "1.17×")},
    ("OPT 13B/125M", "finance-alpaca"): {"A100": ("4.82%", "2.32×"), "V100": ("3.41%", "3.4×")},
    ("Dolly 12B/3B", "finance-alpaca"): {"A100": ("9.11%", "1.03×")},
    ("LLaMA 70B/7B", "humaneval"): {"A100": ("10.35%", "2.41×")},
    ("LLaMA 70B/13B", "humaneval"): {"A100": ("8.53%", "2.23×")},
    ("BLOOM 7B/560M", "humaneval"): {"A100": ("8.14%", "1.04×"), "V100": ("2.51%", "1.09×"),
                                     "4090": ("3.09%", "1.25×")},
    ("BLOOM 7B/1B1", "humaneval"): {"A100": ("4.03%", "1.1×"), "V100": ("3.57%", "1.16×"), "4090": ("3.51%", "1.3×")},
    ("OPT 13B/125M", "humaneval"): {"A100": ("11.40%", "2.29×"), "V100": ("2.15%", "3.34×")},
    ("Dolly 12B/3B", "humaneval"): {"A100": ("15.20%", "1.07×")},
    ("LLaMA 70B/7B", "gsm8k"): {"A100": ("7.13%", "2.28×")},
    ("LLaMA 70B/13B", "gsm8k"): {"A100": ("9.66%", "2.08×")},
    ("BLOOM 7B/560M", "gsm8k"): {"A100": ("15.03%", "1.×"), "V100": ("2.52%", "1.01×"), "4090": ("4.84%", "1.18×")},
    ("BLOOM 7B/1B1", "gsm8k"): {"A100": ("10.70%", "1.×"), "V100": ("0.77%", "1.02×"), "4090": ("1.97%", "1.19×")},
    ("OPT 13B/125M", "gsm8k"): {"A100": ("5.95%", "2.24×"), "V100": ("10.52%", "3.36×")},
    ("Dolly 12B/3B", "gsm8k"): {"A100": ("16.92%", "1.06×")},
    ("LLaMA 70B/7B", "xsum"): {"A100": ("2.94%", "1.73×")},
    ("LLaMA 70B/13B", "xsum"): {"A100": ("0.14%", "1.75×")},
    ("BLOOM 7B/560M", "xsum"): {"A100": ("77.50%", "1.×"), "V100": ("49.30%", "1.×"), "4090": ("54.63%", "1.×")},
    ("BLOOM 7B/1B1", "xsum"): {"A100": ("70.91%", "1.×"), "V100": ("42.94%", "1.×"), "4090": ("54.17%", "1.×")},
    ("OPT 13B/125M", "xsum"): {"A100": ("10.64%", "1.02×"), "V100": ("7.91%", "2.43×")},
}
# adaptive Table 3: (target, with selection?) -> (dataset, gpu) -> SPS
ADAPTIVE_TABLE3 = {
    ("LLaMA 70B", False): {("finance-alpaca", "A100"): "6.43%", ("humaneval", "A100"): "10.35%",
                           ("gsm8k", "A100"): "9.66%"},
    ("LLaMA 70B", True): {("finance-alpaca", "A100"): "6.46%", ("humaneval", "A100"): "11.11%",
                          ("gsm8k", "A100"): "9.66%"},
    ("BLOOM 7B", False): {("finance-alpaca", "A100"): "4.36%", ("finance-alpaca", "V100"): "7.69%",
                          ("finance-alpaca", "4090"): "3.70%", ("humaneval", "A100"): "8.14%",
                          ("humaneval", "V100"): "3.57%",
                          ("humaneval", "4090"): "3.51%", ("gsm8k", "A100"): "9.76%", ("gsm8k", "V100"): "2.52%",
                          ("gsm8k", "4090"): "4.84%"},
    ("BLOOM 7B", True): {("finance-alpaca", "A100"): "4.94%", ("finance-alpaca", "V100"): "16.48%",
                         ("finance-alpaca", "4090"): "8.15%", ("humaneval", "A100"): "8.57%",
                         ("humaneval", "V100"): "4.96%",
                         ("humaneval", "4090"): "4.17%", ("gsm8k", "A100"): "9.76%", ("gsm8k", "V100"): "3.55%",
                         ("gsm8k", "4090"): "6.83%"},
}


def paper_pair(paper: str, pair) -> str | tuple[str, str] | None:
    """The paper's name for a harness pair, or None (not one of the paper's pairs)."""
    return PAIRS.get(paper, {}).get(str(pair))


def paper_dataset(paper: str, dataset) -> str | None:
    return DATASETS.get(paper, {}).get(str(dataset))


def paper_gpu(gpu) -> str | None:
    return GPUS.get(str(gpu))
