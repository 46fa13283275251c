"""experiments/ddsperf"""
