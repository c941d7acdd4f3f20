"""Money: cost per million output tokens, annual cost at a stated load, and what speculation saves.

  cost per 1M output tokens = GPUs x price per GPU-hour / (aggregate output tok/s x 3600) x 10^6
  annual cost               = GPUs x price x hours per day x 365            (the fleet, busy or not)
                           or daily output tokens x 365 / 10^6 x cost per 1M  (--daily-output-tokens)
  with speculation          = annual cost / projected speedup   (same traffic, fewer GPU-hours)
  annual savings            = annual cost x (1 - 1 / speedup)
  (an endpoint that already speculates: plain decoding would cost annual cost x speedup, and the
   savings are annual cost x (speedup - 1))

Currencies: USD and INR; 1 USD = 84 INR by default (an assumption: --usd-to-inr).
Example (field report): one H100 at $4.50/h doing 213 tok/s -> 4.5 / (213 x 3600) x 1e6 = $5.87.
"""
from __future__ import annotations

from dataclasses import dataclass

from turbospec.audit.gpus import GPU

CURRENCIES = {"USD": "$", "INR": "₹"}
DEFAULT_USD_TO_INR = 84.0


@dataclass(frozen=True)
class CostModel:
    currency: str
    price_per_gpu_hour: float
    price_source: str
    num_gpus: int
    usd_to_inr: float = DEFAULT_USD_TO_INR
    hours_per_day: float = 24.0
    daily_output_tokens: float | None = None

    def __post_init__(self) -> None:
        if self.currency not in CURRENCIES:
            raise ValueError(f"--currency {self.currency!r}: use USD or INR")
        if self.price_per_gpu_hour <= 0:
            raise ValueError("--gpu-price must be positive (price of one GPU-hour in --currency)")
        if self.num_gpus < 1:
            raise ValueError("--num-gpus must be at least 1 (GPUs behind the endpoint)")
        if self.usd_to_inr <= 0:
            raise ValueError("--usd-to-inr must be positive, e.g. 84")
        if not 0 < self.hours_per_day <= 24:
            raise ValueError("--hours-per-day must be in (0, 24]")
        if self.daily_output_tokens is not None and self.daily_output_tokens <= 0:
            raise ValueError("--daily-output-tokens must be positive, e.g. 5e8")

    @classmethod
    def for_gpu(cls, gpu: GPU, currency: str, num_gpus: int, price: float | None = None,
                usd_to_inr: float = DEFAULT_USD_TO_INR, **kw) -> "CostModel":
        currency = currency.upper()
        if price is not None:
            return cls(currency, price, "--gpu-price", num_gpus, usd_to_inr, **kw)
        if currency == "INR" and gpu.price_inr_per_hour is not None:
            return cls(currency, gpu.price_inr_per_hour, gpu.price_source, num_gpus, usd_to_inr, **kw)
        if currency == "INR":
            return cls(currency, gpu.price_usd_per_hour * usd_to_inr,
                       f"{gpu.price_source}; ${gpu.price_usd_per_hour}/h at 1 USD = {usd_to_inr:g} INR",
                       num_gpus, usd_to_inr, **kw)
        return cls(currency, gpu.price_usd_per_hour, gpu.price_source, num_gpus, usd_to_inr, **kw)

    def per_million(self, aggregate_tokens_per_s: float) -> float | None:
        if aggregate_tokens_per_s <= 0:
            return None
        return self.num_gpus * self.price_per_gpu_hour / (aggregate_tokens_per_s * 3600.0) * 1e6

    def annual(self, aggregate_tokens_per_s: float, speedup: float | None, already_speculating: bool = False) -> dict:
        """Annual cost as measured, and with / without speculation. When the endpoint already
        speculates, the measured cost is the 'with' case and plain decoding would cost speedup x more."""
        per_m = self.per_million(aggregate_tokens_per_s)
        if self.daily_output_tokens is not None and per_m is not None:
            cost = self.daily_output_tokens * 365 / 1e6 * per_m
            basis = f"{self.daily_output_tokens:,.0f} output tokens a day at the measured cost per token"
        else:
            cost = self.num_gpus * self.price_per_gpu_hour * self.hours_per_day * 365
            basis = f"{self.num_gpus} GPU(s) x {self.hours_per_day:g} h a day x 365 days"
        with_spec = without = None
        if speedup and speedup > 0:
            with_spec, without = (cost, cost * speedup) if already_speculating else (cost / speedup, cost)
        return {"annual_cost": cost, "annual_cost_with_speculation": with_spec,
                "annual_cost_without_speculation": without,
                "annual_savings": without - with_spec if with_spec is not None else None,
                "basis": basis, "currency": self.currency}

    def to_dict(self) -> dict:
        return {"currency": self.currency, "price_per_gpu_hour": self.price_per_gpu_hour,
                "price_source": self.price_source, "num_gpus": self.num_gpus,
                "usd_to_inr": self.usd_to_inr, "usd_to_inr_note": "assumed exchange rate (--usd-to-inr)",
                "hours_per_day": self.hours_per_day, "daily_output_tokens": self.daily_output_tokens}


def format_percent(x: float | None) -> str:
    """12%, 5.2% (under 10%: one decimal, so 5.2% never reads as the 5% it exceeds), 0.07% (under 1%)."""
    if x is None:
        return "–"
    if x == 0 or abs(x) >= 0.1:
        return f"{x:.0%}"
    return f"{x:.1%}" if abs(x) >= 0.01 else f"{x:.2%}"


def format_money(amount: float | None, currency: str) -> str:
    """$12,345.67 / ₹12,346 (Indian grouping), ₹26.28 lakh, ₹3.20 crore; the sign goes first.
    The form is chosen on the value as it would be shown (rounded), so ₹99,999.7 is ₹1.00 lakh, never
    ₹100,000, and ₹99,99,999 is ₹1.00 crore, never ₹100.00 lakh."""
    if amount is None:
        return "n/a"
    sign, x, sym = "-" if amount < 0 else "", abs(amount), CURRENCIES[currency]
    if round(x, 2) < 1000:
        return f"{sign}{sym}{x:.2f}" if currency == "INR" else f"{sign}{sym}{x:,.2f}"
    if currency != "INR":
        return f"{sign}{sym}{x:,.0f}"
    if round(x) < 1e5:
        whole = f"{round(x):d}"                    # 1,000 .. 99,999: Indian and western grouping agree
        return f"{sign}{sym}{whole[:-3]},{whole[-3:]}"
    if round(x / 1e5, 2) < 100:
        return f"{sign}{sym}{x / 1e5:,.2f} lakh"
    return f"{sign}{sym}{x / 1e7:,.2f} crore"
