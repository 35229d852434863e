"""Stand-ins for what TRL's trainer methods read from ``self`` when the parity tests call them
unbound: one process, so every reduce and gather is the identity."""


class SingleProcessAccelerator:
    num_processes = 1
    sync_gradients = True

    @staticmethod
    def reduce(tensor, reduction="sum"):
        return tensor

    @staticmethod
    def gather(tensor):
        return tensor

    gather_for_metrics = gather

    @staticmethod
    def pad_across_processes(tensor, dim=0, pad_index=0):
        return tensor
