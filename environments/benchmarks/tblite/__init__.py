"""TBLite evaluation env (a TerminalBench-2 variant): ``tblite_env.TBLiteEvalEnv``."""
