"""BroRL Section 2 (theory) and Section 4.1 (the token-level simulation behind Figure 3)."""

from brorl.theory.mass_balance import (
    MassBalance,
    expected_unsampled_second_moments,
    mass_balance,
    monte_carlo_unsampled_second_moments,
)

__all__ = [
    "MassBalance",
    "mass_balance",
    "expected_unsampled_second_moments",
    "monte_carlo_unsampled_second_moments",
]
