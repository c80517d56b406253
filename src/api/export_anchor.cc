// The shared library's own translation unit: the exported C API lives in mlajit_core (linked whole), this
// file only gives the linker a unit to build libmlajit.so around.
