"""The gates: syntax-tree checks that decide which student code the grader will run, and how.

Both sides import them: the grader (:mod:`autograder`) refuses a cell with them before running it, and
:mod:`gpucourse.check` tells a student, in the notebook, what the grader will say. They hold rules,
never a graded answer.

* :mod:`.kernel_gate`: a kernel cell defines kernels only, and runs alike on the simulator and a GPU (modules 02-07);
* :mod:`.njit_gate`: an ``@njit`` answer is its cell's own loops (module 07);
* :mod:`.torch_gate`: an answer is torch operations whose ops the grader can count (modules 06, 09);
* :mod:`.syntax`: what the gates share (one scope, one refusal, one literal test, the walk the allow-list gates subclass);
* :mod:`.ops`: how an op count is read (the ops called from Python, a launcher's launches, which ops are work).
"""
