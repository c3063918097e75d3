// moerun CLI entry point (commands are being built; see tools/moerun/).
#include <cstdio>
int main() { std::puts("moerun: under construction"); return 0; }
