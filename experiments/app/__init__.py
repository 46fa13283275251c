"""experiments/app"""
