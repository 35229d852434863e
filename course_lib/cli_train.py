"""Placeholder replaced by the trainer's CLI."""


def add_train_arguments(parser):
    pass


def run_train(args):
    raise NotImplementedError
