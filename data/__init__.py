"""simworld.data: the one trajectory schema, dump readers and writers, and the real
environments that record ground truth.

    from simworld.data import read_episodes, write_episodes
    episodes = read_episodes("dump.jsonl").episodes
"""
