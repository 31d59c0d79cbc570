"""Console tools, above the library they drive: ``harness-power-probe`` (:mod:`.probe`) and
``harness-gpu-check`` (:mod:`.gpu_check`). They may import anything in ``harness``; nothing in
``harness`` imports them."""
