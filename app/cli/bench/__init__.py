"""`logitlab bench`: our generation loop timed against the baselines a user would otherwise run (`command`), a
server's throughput (`remote`), N samples against one (`samples`), and the tables a person reads (`table`).
"""
