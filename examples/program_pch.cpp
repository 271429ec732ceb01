// Compiles nothing: the object library around it builds the precompiled header every program
// reuses (examples/CMakeLists.txt, tapegrad_program_pch).
