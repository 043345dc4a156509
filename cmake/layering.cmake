# Enforces the layering of docs/architecture.md at configure time: arrows point one way only.
#
#   ddpd_common  <-  ddpd_proto/ddpd_api  <-  {coordinator, ddpctl, ddpd-worker}
#   ddpd_common  <-  ddpd_service         <-  {coordinator, ddpctl, ddpd-worker}
#   ddpd_common  <-  ddpd_core (+ ddpd_kernels, LibTorch)  <-  {ddpd-worker, ddpd-train}
#
# For each checked target, every target reachable through its link libraries is collected; a
# forbidden one, or an include directory under a forbidden source folder, stops the configure
# with the path that reaches it.

# Targets reachable from `target` through LINK_LIBRARIES / INTERFACE_LINK_LIBRARIES.
function(_ddpd_link_closure target out)
  set(seen "")
  set(queue ${target})
  while(queue)
    list(POP_FRONT queue current)
    if(NOT TARGET ${current} OR current IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${current})
    get_target_property(type ${current} TYPE)
    set(links "")
    if(NOT type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(direct ${current} LINK_LIBRARIES)
      if(direct)
        list(APPEND links ${direct})
      endif()
    endif()
    get_target_property(interface ${current} INTERFACE_LINK_LIBRARIES)
    if(interface)
      list(APPEND links ${interface})
    endif()
    foreach(link IN LISTS links)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" link "${link}")
      list(APPEND queue ${link})
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

# Fails when `target` reaches any of the targets after FORBID_TARGETS, or sees an include
# directory under any folder after FORBID_DIRS (relative to the project root).
function(ddpd_forbid target)
  cmake_parse_arguments(ARG "" "" "FORBID_TARGETS;FORBID_DIRS" ${ARGN})
  _ddpd_link_closure(${target} closure)
  foreach(forbidden IN LISTS ARG_FORBID_TARGETS)
    if(forbidden IN_LIST closure)
      message(FATAL_ERROR "layering: ${target} links ${forbidden} (docs/architecture.md)")
    endif()
  endforeach()
  foreach(reached IN LISTS closure)
    foreach(property INCLUDE_DIRECTORIES INTERFACE_INCLUDE_DIRECTORIES)
      get_target_property(type ${reached} TYPE)
      if(property STREQUAL "INCLUDE_DIRECTORIES" AND
         (type STREQUAL "INTERFACE_LIBRARY" OR NOT reached STREQUAL target))
        continue()
      endif()
      get_target_property(dirs ${reached} ${property})
      foreach(dir IN LISTS dirs)
        foreach(folder IN LISTS ARG_FORBID_DIRS)
          if(dir MATCHES "^${PROJECT_SOURCE_DIR}/${folder}(/|$)")
            message(FATAL_ERROR
                    "layering: ${target} sees ${dir} through ${reached} (docs/architecture.md)")
          endif()
        endforeach()
      endforeach()
    endforeach()
  endforeach()
endfunction()

function(ddpd_check_layering)
  set(torch_targets torch torch_library torch_cpu c10)
  set(core_targets ddpd_core ddpd_core_objects ddpd_core_cuda ddpd_kernels ddpd_kernels_objects
                   ddpd_kernels_cuda ${torch_targets})
  ddpd_forbid(ddpd_common FORBID_TARGETS ddpd_proto ddpd_api ddpd_service ${core_targets}
              gRPC::grpc++ protobuf::libprotobuf FORBID_DIRS proto service core worker
              kernels coordinator client)
  foreach(target ddpd_proto ddpd_api)
    ddpd_forbid(${target} FORBID_TARGETS ddpd_service ${core_targets} ddpd_coordinator_core
                FORBID_DIRS service core worker kernels coordinator client)
  endforeach()
  ddpd_forbid(ddpd_service FORBID_TARGETS ddpd_proto ddpd_api ${core_targets}
              FORBID_DIRS proto core worker kernels coordinator client)
  foreach(target ddpd_core ddpd_core_cuda)
    if(TARGET ${target})
      ddpd_forbid(${target} FORBID_TARGETS ddpd_proto ddpd_api ddpd_service gRPC::grpc++
                  FORBID_DIRS proto service worker coordinator client)
    endif()
  endforeach()
  foreach(target ddpd_coordinator_core ddpd-coordinator ddpctl ddpd_plan ddpd_tune)
    ddpd_forbid(${target} FORBID_TARGETS ${core_targets} FORBID_DIRS core worker kernels)
  endforeach()
endfunction()
