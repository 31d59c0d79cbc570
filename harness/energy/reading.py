"""What a measurement reports, and how per-prompt readings add up to a cell's J/token."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

NAN = math.nan


@dataclass
class EnergyReading:
    """Energy of one measured workload. NaN fields, with ``reason`` set, where not measurable.

    ``energy_j`` is per run of the workload (the protocol repeats it ``repetitions`` times over
    ``trials`` trials and divides); ``total_energy_j`` covers all measured runs. Gross energy is
    what the GPUs drew; net subtracts the idle baseline (``idle_power_w`` × duration).
    """

    source: str = "none"
    energy_j: float = NAN
    net_energy_j: float = NAN
    total_energy_j: float = NAN
    mean_power_w: float = NAN
    idle_power_w: float = NAN
    duration_s: float = NAN
    measured_s: float = NAN
    samples: int = 0
    coverage: float = NAN
    repetitions: int = 1
    trials: int = 1
    trial_spread: float = NAN
    polled_energy_j: float = NAN
    update_period_s: float = NAN
    label: str = ""
    reason: str | None = None

    @property
    def total_net_energy_j(self) -> float:
        return self.net_energy_j * self.repetitions

    def as_record(self, new_tokens: int | None = None, prefix: str = "energy.") -> dict:
        """``energy.*`` fields; with ``new_tokens`` (summed over ALL runs ``measure`` returned),
        also gross and net J/token."""
        record = {prefix + k: v for k, v in asdict(self).items()}
        if new_tokens is None:
            return record
        record[prefix + "tokens"] = new_tokens
        record[prefix + "j_per_token"] = self.total_energy_j / new_tokens if new_tokens else NAN
        record[prefix + "net_j_per_token"] = self.total_net_energy_j / new_tokens if new_tokens else NAN
        if not new_tokens and self.reason is None:
            record[prefix + "reason"] = "no new tokens: J/token is undefined"
        return record


def summarize_records(records: list[dict], prefix: str = "energy.") -> dict:
    """Cell summary from per-prompt records made by :meth:`EnergyReading.as_record`: J/token
    gross and net (total energy ÷ total tokens), mean W, sources, mean coverage; NaN with the
    reasons if any prompt was not measured."""
    get = lambda r, k, default=NAN: r.get(prefix + k, default)  # noqa: E731
    unmeasured = [r for r in records if not math.isfinite(get(r, "total_energy_j")) or not get(r, "tokens")]
    reasons = sorted({get(r, "reason", None) or "not measured" for r in unmeasured})
    summary = {
        prefix + "source": ",".join(sorted({get(r, "source", "none") for r in records})) or "none",
        prefix + "prompts_measured": len(records) - len(unmeasured),
        prefix + "prompts": len(records),
    }
    if unmeasured or not records:
        why = f"{len(unmeasured)} of {len(records)} prompts not measured: " + "; ".join(reasons) if records \
            else "no prompts"
        summary.update({prefix + k: NAN for k in ("j_per_token", "net_j_per_token", "mean_power_w", "coverage",
                                                   "total_energy_j", "idle_power_w")})
        summary[prefix + "reason"] = why
        return summary
    total = sum(get(r, "total_energy_j") for r in records)
    net = sum(get(r, "net_energy_j") * get(r, "repetitions", 1) for r in records)
    tokens = sum(get(r, "tokens") for r in records)
    seconds = sum(get(r, "measured_s") for r in records)
    summary.update({
        prefix + "j_per_token": total / tokens,
        prefix + "net_j_per_token": net / tokens,
        prefix + "mean_power_w": total / seconds if seconds > 0 else NAN,
        prefix + "coverage": sum(get(r, "coverage") for r in records) / len(records),
        prefix + "total_energy_j": total,
        prefix + "idle_power_w": get(records[0], "idle_power_w"),
        prefix + "reason": None,
    })
    return summary
