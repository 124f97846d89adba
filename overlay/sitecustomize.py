"""Start-up hook of the FlashSAC overlay: every Python process with overlay/ first on PYTHONPATH records provenance."""

try:
    import flashsac_provenance

    flashsac_provenance.install()
except Exception as exc:  # provenance must never break a run, but must not vanish silently either
    import sys

    print(f"!!! FLASHSAC OVERLAY PROVENANCE: start-up hook failed: {exc!r} !!!", file=sys.stderr)
