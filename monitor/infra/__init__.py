"""The infra layer: GPUs read through NVML, scraped from dcgm-exporter, or replayed from a trace.

Every source produces the same plain `GpuReading`s (base units, `None` where the GPU does not
support a field); `render.render_infra` turns them into metric families.
"""
