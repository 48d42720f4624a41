"""The notebooks' side: a session's start on Colab (`notebooks`), headless notebook runs, and the
git hooks that keep notebooks clean (`githooks`)."""
