/* Keeps the support library non-empty. */
int tk_test_support_empty;
