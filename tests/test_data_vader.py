"""VADER's movie-snippet reader (`maskbench.data.vader`): CRLF lines, labels outside the scale and
empty texts counted."""

from maskbench.data.vader import read_vader_movie_snippets


def test_vader_movie_snippets(tmp_path):
    path = tmp_path / "movieReviewSnippets_GroundTruth.txt"
    lines = [
        "id\tsentiment\ttext",
        "1\t2.26666666667\tThe Rock is destined to be the 21st Century's new ''Conan'' and that he's going to make a "
        "splash.",
        "3\t-0.6\tEffective but too tepid biopic",
        "4\t9.5\tout of range",
        "5\tn/a\tnot a number",
        "6\t1.0\t ",
    ]
    path.write_bytes(("\r\n".join(lines) + "\r\n").encode())
    rows, skipped = read_vader_movie_snippets(path)
    assert rows[1] == {"text": "Effective but too tepid biopic", "text_pair": None, "label": -0.6}
    assert rows[0]["text"].endswith("''Conan'' and that he's going to make a splash.")
    assert skipped == {"label_outside_set": 2, "empty_text": 1}
