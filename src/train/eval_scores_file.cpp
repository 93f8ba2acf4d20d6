#include "train/eval_scores_file.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "data/hdf5_id.hpp"

namespace avtrain {

namespace {
using data::H5Id;

void write_dataset(hid_t file, const std::string& path, const char* name, hid_t file_type, hid_t mem_type,
                   const std::vector<hsize_t>& dims, const void* values) {
  const H5Id space(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose);
  const H5Id dataset(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose);
  if (!dataset.valid() || H5Dwrite(dataset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) < 0)
    throw Error(path + ": cannot write " + name + " (disk full?)");
}
}  // namespace

void write_eval_scores(const std::string& path, const std::vector<std::int64_t>& index, const std::vector<float>& logits,
                       const std::vector<std::uint8_t>& targets, int classes,
                       const std::vector<std::string>& class_names) {
  const std::string temporary = path + ".tmp";
  {
    const std::lock_guard lock(data::hdf5_mutex());
    const H5Id file(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!file.valid()) throw Error(temporary + ": cannot create the file");
    const auto n = hsize_t(index.size()), k = hsize_t(classes);
    write_dataset(file.get(), temporary, "/index", H5T_STD_I64LE, H5T_NATIVE_INT64, {n}, index.data());
    write_dataset(file.get(), temporary, "/logits", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {n, k}, logits.data());
    write_dataset(file.get(), temporary, "/targets", H5T_STD_U8LE, H5T_NATIVE_UINT8, {n, k}, targets.data());
    if (!class_names.empty()) {
      const hsize_t count = class_names.size();
      const H5Id space(H5Screate_simple(1, &count, nullptr), H5Sclose);
      const H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
      H5Tset_size(type.get(), H5T_VARIABLE);
      H5Tset_cset(type.get(), H5T_CSET_UTF8);
      std::vector<const char*> texts;
      for (const std::string& name : class_names) texts.push_back(name.c_str());
      const H5Id attribute(H5Acreate2(file.get(), "class_names", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                           H5Aclose);
      if (!attribute.valid() || H5Awrite(attribute.get(), type.get(), texts.data()) < 0)
        throw Error(temporary + ": cannot write attribute class_names");
    }
    if (H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0) throw Error(temporary + ": cannot write the file (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw Error(path + ": cannot rename " + temporary + " into place: " + ec.message());
}

}  // namespace avtrain
