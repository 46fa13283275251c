"""netem"""
