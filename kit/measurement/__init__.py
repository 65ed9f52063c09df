"""Measurement: figures you can trust, and what may be said of them.

    measure             repeated, interleaved timings with median and spread, flagged when unreliable
    goals               a figure against its target: met, NOT met, or neither
    load                how much of the CPU other processes took while kit measured
    tables              result tables as HTML and as plain text
    prose               sentences generated from measurements
    reference           your machine beside a reference GPU run (reference_runs, reference_limits)

Needs nothing of arrays or training; `from kit import measure` keeps working.
"""
