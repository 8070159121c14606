"""A direct port of google-research/bert run_squad.py's feature creation, for parity.

Loops and dicts as in the original (``read_squad_examples``,
``convert_examples_to_features``, ``_improve_answer_span``,
``_check_is_max_context``), with the word-by-word tokenisation of the
original; only the tokenizer is ours.
"""

import collections
import json


def _is_whitespace(c):
    return c in (" ", "\t", "\r", "\n") or ord(c) == 0x202F


def read_examples(input_file, is_training):
    with open(input_file, encoding="utf-8") as reader:
        input_data = json.load(reader)["data"]
    examples = []
    for entry in input_data:
        for paragraph in entry["paragraphs"]:
            paragraph_text = paragraph["context"]
            doc_tokens, char_to_word_offset = [], []
            prev_is_whitespace = True
            for c in paragraph_text:
                if _is_whitespace(c):
                    prev_is_whitespace = True
                else:
                    if prev_is_whitespace:
                        doc_tokens.append(c)
                    else:
                        doc_tokens[-1] += c
                    prev_is_whitespace = False
                char_to_word_offset.append(len(doc_tokens) - 1)
            for qa in paragraph["qas"]:
                start_position = end_position = orig_answer_text = None
                if is_training:
                    answer = qa["answers"][0]
                    orig_answer_text = answer["text"]
                    answer_offset = answer["answer_start"]
                    start_position = char_to_word_offset[answer_offset]
                    end_position = char_to_word_offset[answer_offset + len(orig_answer_text)
                                                       - 1]
                    actual_text = " ".join(doc_tokens[start_position:end_position + 1])
                    cleaned = " ".join(orig_answer_text.split())
                    if actual_text.find(cleaned) == -1:
                        continue
                examples.append(dict(qas_id=qa["id"], question_text=qa["question"],
                                     doc_tokens=doc_tokens,
                                     orig_answer_text=orig_answer_text,
                                     start_position=start_position,
                                     end_position=end_position))
    return examples


def _improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
    tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
    for new_start in range(input_start, input_end + 1):
        for new_end in range(input_end, new_start - 1, -1):
            if " ".join(doc_tokens[new_start:new_end + 1]) == tok_answer_text:
                return new_start, new_end
    return input_start, input_end


def _check_is_max_context(doc_spans, cur_span_index, position):
    best_score, best_span_index = None, None
    for span_index, doc_span in enumerate(doc_spans):
        end = doc_span.start + doc_span.length - 1
        if position < doc_span.start or position > end:
            continue
        num_left_context = position - doc_span.start
        num_right_context = end - position
        score = min(num_left_context, num_right_context) + 0.01 * doc_span.length
        if best_score is None or score > best_score:
            best_score, best_span_index = score, span_index
    return cur_span_index == best_span_index


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training):
    features = []
    DocSpan = collections.namedtuple("DocSpan", ["start", "length"])
    for example_index, example in enumerate(examples):
        query_tokens = tokenizer.tokenize(example["question_text"])[:max_query_length]
        tok_to_orig_index, orig_to_tok_index, all_doc_tokens = [], [], []
        for i, token in enumerate(example["doc_tokens"]):
            orig_to_tok_index.append(len(all_doc_tokens))
            for sub_token in tokenizer.tokenize(token):
                tok_to_orig_index.append(i)
                all_doc_tokens.append(sub_token)
        if is_training:
            tok_start_position = orig_to_tok_index[example["start_position"]]
            if example["end_position"] < len(example["doc_tokens"]) - 1:
                tok_end_position = orig_to_tok_index[example["end_position"] + 1] - 1
            else:
                tok_end_position = len(all_doc_tokens) - 1
            tok_start_position, tok_end_position = _improve_answer_span(
                all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
                example["orig_answer_text"])
        max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
        doc_spans = []
        start_offset = 0
        while start_offset < len(all_doc_tokens):
            length = min(len(all_doc_tokens) - start_offset, max_tokens_for_doc)
            doc_spans.append(DocSpan(start=start_offset, length=length))
            if start_offset + length == len(all_doc_tokens):
                break
            start_offset += min(length, doc_stride)
        for doc_span_index, doc_span in enumerate(doc_spans):
            tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
            segment_ids = [0] * len(tokens)
            token_to_orig_map, token_is_max_context = {}, {}
            for i in range(doc_span.length):
                split_token_index = doc_span.start + i
                token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
                token_is_max_context[len(tokens)] = _check_is_max_context(
                    doc_spans, doc_span_index, split_token_index)
                tokens.append(all_doc_tokens[split_token_index])
                segment_ids.append(1)
            tokens.append("[SEP]")
            segment_ids.append(1)
            start_position = end_position = 0
            if is_training:
                doc_start = doc_span.start
                doc_end = doc_span.start + doc_span.length - 1
                if tok_start_position >= doc_start and tok_end_position <= doc_end:
                    doc_offset = len(query_tokens) + 2
                    start_position = tok_start_position - doc_start + doc_offset
                    end_position = tok_end_position - doc_start + doc_offset
            features.append(dict(
                example_index=example_index, doc_span_index=doc_span_index,
                tokens=tokens, input_ids=tokenizer.convert_tokens_to_ids(tokens),
                segment_ids=segment_ids, token_to_orig_map=token_to_orig_map,
                token_is_max_context=token_is_max_context,
                start_position=start_position, end_position=end_position))
    return features
