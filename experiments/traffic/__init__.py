"""experiments/traffic"""
