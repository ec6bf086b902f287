"""The wrong answers a policy finds (envs.wrong_answers), built from a gold answer's shape."""

from envs.wrong_answers import near_misses, same_answer, structural_changes, wrong_answers


def test_near_misses_differ_from_the_gold_in_value():
    assert near_misses("ytilaidola") == {"appended": "ytilaidolaxyz", "twice": "ytilaidola ytilaidola",
                                         "dropped_last": "ytilaidol", "whitespace": "ytila idola", "empty": ""}
    assert "dropped_last" not in near_misses("-100.0") and "dropped_last" not in near_misses("3.14")  # same, rounded
    assert near_misses("3.5")["dropped_last"] == "3." and near_misses("Bob is a knave.")["dropped_last"].endswith("knav.")
    assert "whitespace" not in near_misses("['1', '2']")
    assert same_answer("12.0", "12.00") and same_answer("[1, 2]", "[1,2]") and not same_answer("12", "1 2")


def test_a_number_is_negated_moved_by_one_scaled_and_given_another_unit():
    assert structural_changes("4") == {"plus_one": "5", "negated": "-4", "times_ten": "40"}
    assert structural_changes("21.80°") == {"plus_one": "22.8°", "negated": "-21.8°", "times_ten": "218.0°",
                                            "other_unit": "21.80 rad"}
    assert structural_changes("0") == {"plus_one": "1"}  # -0 and 0 * 10 are the gold


def test_a_list_keeps_its_delimiter_and_gets_an_element_more_fewer_or_swapped():
    assert structural_changes("weeks, upon, since") == {"element_more": "weeks, upon, since, weeks",
                                                        "element_fewer": "weeks, upon", "swapped": "upon, weeks, since"}
    assert structural_changes("2 × 17")["swapped"] == "17 × 2"
    assert structural_changes("NOIR,COIR,COIN")["element_fewer"] == "NOIR,COIR"
    assert structural_changes('["a", "a", "b"]')["swapped"] == '["b", "a", "a"]'  # the first two that differ


def test_a_grid_gets_a_row_or_column_more_or_fewer_or_is_transposed():
    changes = structural_changes("1 2\n3 4")
    assert changes == {"row_more": "1 2\n3 4\n3 4", "row_fewer": "1 2", "column_more": "1 2 2\n3 4 4",
                       "column_fewer": "1\n3", "transposed": "1 3\n2 4"}
    assert structural_changes("[[0,1,1],[1,0,0]]")["transposed"] == "[[0,1],[1,0],[1,0]]"
    assert structural_changes("❌✅\n✅✅")["transposed"] == "❌✅\n✅✅"  # symmetric: wrong_answers drops it
    assert "transposed" not in wrong_answers("❌✅\n✅✅") and "row_more" in wrong_answers("❌✅\n✅✅")


def test_answers_without_a_shape_get_only_near_misses():
    assert structural_changes("Sunday") == {} and structural_changes("") == {}
    assert set(wrong_answers("Sunday")) == {"appended", "twice", "dropped_last", "whitespace", "empty"}
