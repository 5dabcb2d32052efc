"""How each runtime's worker starts: its server wrapper, the checks it makes before it loads, the seams it relies on."""
