// Reference softmax and log-softmax over rows. T = float or double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace myriad::ref {

template <class T>
void log_softmax_forward(T* y, const T* x, int64_t rows, int64_t N) {
  for (int64_t r = 0; r < rows; ++r) {
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < N; ++j) mx = std::max(mx, x[r * N + j]);
    T s = 0;
    for (int64_t j = 0; j < N; ++j) s += std::exp(x[r * N + j] - mx);
    const T lse = mx + std::log(s);
    for (int64_t j = 0; j < N; ++j) y[r * N + j] = x[r * N + j] - lse;
  }
}

template <class T>
void softmax_forward(T* y, const T* x, int64_t rows, int64_t N) {
  log_softmax_forward(y, x, rows, N);
  for (int64_t i = 0; i < rows * N; ++i) y[i] = std::exp(y[i]);
}

template <class T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t N) {
  for (int64_t r = 0; r < rows; ++r) {
    T dot = 0;
    for (int64_t j = 0; j < N; ++j) dot += dy[r * N + j] * y[r * N + j];
    for (int64_t j = 0; j < N; ++j) dx[r * N + j] += y[r * N + j] * (dy[r * N + j] - dot);
  }
}

template <class T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t N) {
  for (int64_t r = 0; r < rows; ++r) {
    T s = 0;
    for (int64_t j = 0; j < N; ++j) s += dy[r * N + j];
    for (int64_t j = 0; j < N; ++j) dx[r * N + j] += dy[r * N + j] - std::exp(y[r * N + j]) * s;
  }
}

}  // namespace myriad::ref
