"""Concentric circular antenna array: uniform excitation on rings half a wavelength apart."""


def design() -> list[float]:
    a1, a2, a3, a4 = 1.0, 1.0, 1.0, 1.0  # relative amplitude of each ring, innermost first
    ring1 = [a1, a1, a1, a1, a1]  # 5 elements
    ring2 = [a2, a2, a2, a2, a2, a2, a2]  # 7 elements
    ring3 = [a3, a3, a3, a3, a3, a3, a3, a3, a3]  # 9 elements
    ring4 = [a4, a4, a4, a4, a4, a4, a4, a4, a4, a4, a4]  # 11 elements
    radii = [0.5, 1.0, 1.5, 2.0]  # ring radii in wavelengths
    return [*ring1, *ring2, *ring3, *ring4, *radii]
