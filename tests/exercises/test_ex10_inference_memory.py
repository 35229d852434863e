from course_lib.checks import ex10


def test_chunked_selective_log_softmax(exercise):
    ex10.check_chunked_selective_log_softmax(exercise("ex10_inference_memory").chunked_selective_log_softmax)


def test_logits_memory_bytes(exercise):
    ex10.check_logits_memory_bytes(exercise("ex10_inference_memory").logits_memory_bytes)


def test_kv_cache_bytes(exercise):
    ex10.check_kv_cache_bytes(exercise("ex10_inference_memory").kv_cache_bytes)


def test_truncated_is_weight(exercise):
    ex10.check_truncated_is_weight(exercise("ex10_inference_memory").truncated_is_weight)


def test_correction_weight(exercise):
    ex10.check_correction_weight(exercise("ex10_inference_memory").correction_weight)


def test_sampling_version(exercise):
    ex10.check_sampling_version(exercise("ex10_inference_memory").sampling_version)
