#include "mlip/ops/operators.h"

#include "mlip/ops/activation.h"
#include "mlip/ops/bessel_radial.h"
#include "mlip/ops/edge_contraction.h"
#include "mlip/ops/equivariant_message.h"
#include "mlip/ops/radial_net.h"
#include "mlip/ops/se_environment.h"
#include "mlip/ops/symmetric_contraction.h"
#include "mlip/ops/tabulated_embedding.h"
#include "mlip/ops/vector_message.h"
#include "mlip/ops/vector_polynomials.h"

namespace mlip {

void link_operators() {
  link_activation_operator();
  link_bessel_radial_operator();
  link_edge_operators();
  link_equivariant_message_operator();
  link_radial_net_operator();
  link_se_environment_operator();
  link_symmetric_contraction_operator();
  link_tabulated_operator();
  link_vector_message_operator();
  link_vector_polynomials_operator();
}

}  // namespace mlip
